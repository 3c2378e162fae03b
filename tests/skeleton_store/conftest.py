"""Fixtures: every store test runs against a local directory and a real S3 server.

The S3 server is moto's WSGI app served by werkzeug on 127.0.0.1 (a free
port), started once per session. Requests are serialised by a lock: moto
checks ``If-None-Match: *`` and then stores the object in two steps, so two of
its request threads could both pass the check, whereas S3 evaluates a
conditional write atomically. Serialising requests gives the server S3's
semantics; the store's concurrency is still exercised by real client
processes racing each other over HTTP.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _store_support import AWS_ENV, Target

BUCKET = "liftguard-test"


class _Serialised:
    """WSGI middleware: one request at a time (see the module docstring)."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app, self.lock = app, threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with self.lock:
            return list(self.app(environ, start_response))


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import WSGIRequestHandler, make_server

    class QuietHandler(WSGIRequestHandler):
        def log(self, *args: Any, **kwargs: Any) -> None:
            pass

    with pytest.MonkeyPatch.context() as mp:
        for k, v in AWS_ENV.items():
            mp.setenv(k, v)
        app = _Serialised(DomainDispatcherApplication(create_backend_app))
        server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=QuietHandler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        endpoint = f"http://127.0.0.1:{server.server_port}"
        import boto3

        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(
            Bucket=BUCKET
        )
        try:
            yield endpoint
        finally:
            server.shutdown()
            thread.join(timeout=5)


@pytest.fixture
def s3_target(s3_endpoint: str) -> Target:
    """A fresh prefix in the session's S3 bucket."""
    import s3fs

    options = {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"endpoint_url": s3_endpoint, "region_name": "us-east-1"},
    }
    fs = s3fs.S3FileSystem(**options)
    return Target("s3", f"s3://{BUCKET}/{uuid.uuid4().hex}", options, fs)


@pytest.fixture(params=["local", "s3"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    """The same test against a local directory and against the S3 server."""
    if request.param == "local":
        return Target("local", str(tmp_path / "store"))
    return request.getfixturevalue("s3_target")  # type: ignore[no-any-return]

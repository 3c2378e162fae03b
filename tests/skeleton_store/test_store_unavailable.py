"""A store that does not exist, and a backend that fails: typed, one-line errors."""

from __future__ import annotations

import re
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _store_support import AWS_ENV, Target

from skeleton_store import SkeletonStore, StoreNotFound, StoreUnavailable
from skeleton_store._errors import VersionNotFound

P = np.array([0.5, 0.5])
FAST = {"connect_timeout": 1, "read_timeout": 1, "retries": {"max_attempts": 1}}


def _reads(store: SkeletonStore) -> dict[str, Any]:
    return {
        "list": store.list,
        "names": store.names,
        "list(name)": lambda: store.list("s"),
        "versions": lambda: store.versions("s"),
        "get": lambda: store.get("s"),
        "get(1)": lambda: store.get("s", 1),
        "show": lambda: store.show("s", "production"),
        "aliases": lambda: store.aliases("s"),
        "alias_history": lambda: store.alias_history("s", "production"),
        "verify": store.verify,
    }


def _missing_store_then_first_write(store: SkeletonStore) -> None:
    for what, read in _reads(store).items():
        with pytest.raises(StoreNotFound, match="does not exist") as err:
            read()
        assert store.url in str(err.value) and err.value.url == store.url, what
        assert isinstance(err.value, VersionNotFound)  # "no such version" callers still work
    assert store.put("s", {"probs": P}, kind="t").version == 1  # a write creates the store
    assert [i.version for i in store.list()] == [1] and store.aliases("s") == {"latest": 1}
    with pytest.raises(VersionNotFound) as err:
        store.get("other")
    assert not isinstance(err.value, StoreNotFound)


def test_reading_a_local_store_that_does_not_exist(tmp_path: Path) -> None:
    root = tmp_path / "nope" / "store"
    _missing_store_then_first_write(SkeletonStore(root))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert SkeletonStore(empty).list() == []  # an existing directory is an empty store


def test_reading_an_s3_store_that_does_not_exist(s3_target: Target) -> None:
    _missing_store_then_first_write(s3_target.store())  # a fresh prefix: nothing there yet
    options = s3_target.storage_options
    bucket = s3_target.url.removeprefix("s3://").split("/")[0]
    SkeletonStore(f"s3://{bucket}", storage_options=options).names()  # an existing bucket: a store
    no_bucket = SkeletonStore(
        f"s3://nosuchbucket-{uuid.uuid4().hex[:8]}/x", storage_options=options
    )
    with pytest.raises(StoreNotFound, match=re.escape(no_bucket.url)):
        no_bucket.list()
    with pytest.raises(StoreUnavailable, match="bucket does not exist") as err:
        no_bucket.put("s", {"probs": P}, kind="t")  # a write cannot create a bucket
    assert no_bucket.url in str(err.value) and err.value.__cause__ is not None


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A local port bound but not listening: connections are refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_an_unreachable_endpoint_is_one_line_naming_the_store(
    closed_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("s3fs")
    for k, v in AWS_ENV.items():
        monkeypatch.setenv(k, v)
    url = "s3://liftguard-test/fleet"
    options = {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {
            "endpoint_url": f"http://127.0.0.1:{closed_port}",
            "region_name": "us-east-1",
        },
        "config_kwargs": FAST,
    }
    store = SkeletonStore(url, storage_options=options)
    start = time.monotonic()
    for what, call in {
        **_reads(store),
        "put": lambda: store.put("s", {"probs": P}, kind="t"),
        "promote": lambda: store.promote("s", 1),
    }.items():
        with pytest.raises(StoreUnavailable) as err:
            call()
        msg = str(err.value)
        assert msg.startswith(f"store {url}: cannot ") and "\n" not in msg, what
        assert "EndpointConnectionError" in msg and str(closed_port) in msg, what
        assert err.value.__cause__ is not None and isinstance(err.value, OSError)
    assert time.monotonic() - start < 60  # no long retry loops


def test_local_permission_errors_are_store_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SkeletonStore(tmp_path)
    store.put("s", {"probs": P}, kind="t")

    def denied(*args: object, **kwargs: object) -> bytes:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(StoreUnavailable, match=r"cannot read s/versions/v00000001\.json") as err:
        store.get("s", 1)
    assert str(tmp_path) in str(err.value) and "PermissionError" in str(err.value)

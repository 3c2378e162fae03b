"""moto's S3 server on 127.0.0.1 for tests that read or write ``s3://`` (a real HTTP
server: s3fs, boto3 and the command line talk to it as to S3)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}


@contextlib.contextmanager
def moto_s3(bucket: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``(endpoint, s3://bucket/<fresh prefix>, storage options)`` of a moto S3 server with
    ``bucket``; the AWS variables (and ``AWS_ENDPOINT_URL``, for fsspec's defaults) are
    set while it runs."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    from moto.server import ThreadedMotoServer

    with pytest.MonkeyPatch.context() as mp:
        for key, value in AWS_ENV.items():
            mp.setenv(key, value)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            endpoint = f"http://{host}:{port}"
            mp.setenv("AWS_ENDPOINT_URL", endpoint)
            import boto3

            boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(
                Bucket=bucket
            )
            options = {
                "key": "testing",
                "secret": "testing",
                "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
            }
            yield endpoint, f"s3://{bucket}/{uuid.uuid4().hex}", options
        finally:
            server.stop()

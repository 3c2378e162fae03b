"""The public surface of skeleton_store, and what importing it pulls in."""

from __future__ import annotations

import subprocess
import sys

import guardrail
import skeleton_store


def test_all_is_sorted_importable_and_pinned() -> None:
    names = skeleton_store.__all__
    # the order is ruff's RUF022 (isort style), checked by the linter
    for name in names:
        assert hasattr(skeleton_store, name), name
    # changing the public surface is a deliberate act: update this list with it
    assert names == [
        "DEFAULT_MAX_CONTEXTS",
        "IntegrityError",
        "SkeletonStore",
        "SkeletonVersion",
        "StoreError",
        "StoreNotFound",
        "StoreUnavailable",
        "build_vsd_version",
        "open_skeleton",
        "resolve_skeleton",
        "save_skeleton",
        "warm_start",
    ]


def test_errors_hierarchy() -> None:
    from skeleton_store import _errors as s
    for exc in (s.InvalidRequest, s.InvalidName, s.VersionNotFound, s.IntegrityError):
        assert issubclass(exc, s.StoreError)
    assert issubclass(s.ConcurrentWriteError, s.StoreError)
    # a missing store is a missing version too; a backend failure is also an OSError
    assert issubclass(s.StoreNotFound, s.VersionNotFound)
    assert issubclass(s.StoreUnavailable, s.StoreError) and issubclass(s.StoreUnavailable, OSError)
    down = s.StoreUnavailable("store s3://b/x: cannot list: boom", url="s3://b/x")
    assert (down.url, str(down)) == ("s3://b/x", "store s3://b/x: cannot list: boom")
    assert issubclass(s.StoreError, guardrail.GuardrailError)
    assert issubclass(s.InvalidName, s.InvalidRequest) and issubclass(s.InvalidName, ValueError)
    assert issubclass(s.VersionNotFound, LookupError)
    err = s.IntegrityError("bad", path="x", array="probs")
    assert (err.path, err.array) == ("x", "probs")


def test_import_is_light_and_side_effect_free() -> None:
    code = (
        "import sys, skeleton_store\n"
        "bad = [m for m in ('fsspec', 's3fs', 'boto3', 'torch', 'adapters') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""

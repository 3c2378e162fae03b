"""``liftguard skeleton`` against both backends: storage options, errors, verify and repair.

S3 runs pass the server and credentials as ``--storage-option`` flags.
"""

from __future__ import annotations

import json
import socket
import time
import uuid

import numpy as np
import pytest
from _store_support import AWS_ENV, Target

from adapters.cli import main

P = np.array([0.5, 0.25, 0.25])
HEAD = "s/aliases/production/e00000002.json"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_error_line(err: str, command: str, *details: str) -> str:
    lines = err.splitlines()
    assert "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith(f"liftguard skeleton {command}: error: "), lines[0]
    for detail in details:
        assert detail in lines[0], (detail, lines[0])
    return lines[0]


def _store_with_damaged_production(target: Target) -> None:
    store = target.store()
    for _ in range(3):
        store.put("s", {"probs": P}, kind="t")
    store.promote("s", 1)
    store.promote("s", 2)
    target.flip_byte(HEAD)


def test_a_damaged_alias_is_contained_and_repaired_by_promote(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    _store_with_damaged_production(target)
    full = f"{target.url}/{HEAD}"
    code, out, err = _run(target.cli("list", "s"), capsys)
    assert code == 0 and [r["tag"] for r in json.loads(out)] == ["v1", "v2", "v3"]
    assert "liftguard skeleton list: warning: alias 'production' of 's'" in err and full in err
    code, out, _ = _run(target.cli("show", "s", "v2"), capsys)
    assert code == 0 and json.loads(out)["tag"] == "v2"
    code, _, err = _run(target.cli("show", "s", "production"), capsys)
    assert code == 1
    _one_error_line(err, "show", full, "does not verify")
    code, out, err = _run(target.cli("promote", "s", "v3"), capsys)
    assert code == 0 and json.loads(out)["seq"] == 3 and json.loads(out)["previous"] == [1]
    assert "warning:" in err and full in err and "kept in place" in err
    code, out, _ = _run(target.cli("verify"), capsys)
    assert code == 0 and json.loads(out)["problems"] == []
    code, out, _ = _run(target.cli("rollback", "s"), capsys)
    assert code == 0 and json.loads(out)["version"] == 1


def test_verify_reports_and_repair_fixes(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    _store_with_damaged_production(target)
    full = f"{target.url}/{HEAD}"
    code, out, _ = _run(target.cli("verify"), capsys)
    report = json.loads(out)
    assert code == 1 and len(report["problems"]) == 1 and full in report["problems"][0]
    assert "repaired" not in report and target.store().verify() == report["problems"]
    code, out, _ = _run(target.cli("verify", "s", "--repair"), capsys)
    report = json.loads(out)
    assert code == 0 and report["problems"] == [] and report["store"] == target.url
    assert len(report["repaired"]) == 2 and "restored v1" in report["repaired"][0]
    code, out, _ = _run(target.cli("show", "s", "production"), capsys)
    assert code == 0 and json.loads(out)["tag"] == "v1"


def test_latest_skips_a_version_with_missing_arrays(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    store = target.store()
    store.put("s", {"probs": P}, kind="t")
    store.put("s", {"probs": P[::-1].copy()}, kind="t")
    blob = f"s/{store.show('s', 2)['blob']['path']}"
    target.delete_raw(blob)
    for argv in (["show", "s"], ["show", "s", "latest"]):
        code, out, err = _run(target.cli(*argv), capsys)
        assert code == 0 and json.loads(out)["tag"] == "v1"
        assert err.startswith("liftguard skeleton show: warning: latest of 's' skips v2: ")
        assert f"{target.url}/{blob}" in err and "missing" in err
    code, out, err = _run(target.cli("list"), capsys)
    rows = {r["tag"]: r["aliases"] for r in json.loads(out)}
    assert code == 0 and rows == {"v1": ["latest"], "v2": []} and "skips v2" in err
    code, _, err = _run(target.cli("show", "s", "v2"), capsys)
    assert code == 0  # show reads the manifest only; get of v2 by number fails:
    code, _, err = _run(target.cli("diff", "s", "v1", "v2"), capsys)
    assert code == 1
    _one_error_line(err, "diff", f"{target.url}/{blob}")


def test_a_store_that_does_not_exist_is_an_error(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = Target(target.kind, f"{target.url}/nothing-here", target.storage_options)
    for argv in (["list"], ["list", "s"], ["show", "s"], ["verify"], ["rollback", "s"]):
        code, out, err = _run(missing.cli(*argv), capsys)
        assert code == 1 and out == "", argv
        _one_error_line(err, argv[0], f"store {missing.url} does not exist")


def test_a_bucket_that_does_not_exist(
    s3_target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"s3://nosuchbucket-{uuid.uuid4().hex[:8]}/x"
    missing = Target("s3", url, s3_target.storage_options)
    code, _, err = _run(missing.cli("list"), capsys)
    assert code == 1
    _one_error_line(err, "list", f"store {url} does not exist")


def test_an_unreachable_endpoint_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("s3fs")
    for k, v in AWS_ENV.items():
        monkeypatch.setenv(k, v)
    with socket.socket() as sock:  # bound, not listening: connections are refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        options = {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}"},
            "config_kwargs": {"connect_timeout": 1, "retries": {"max_attempts": 1}},
        }
        target = Target("s3", "s3://fleet/skeletons", options)
        start = time.monotonic()
        code, out, err = _run(target.cli("list"), capsys)
        assert time.monotonic() - start < 30
    assert code == 1 and out == ""
    _one_error_line(err, "list", "store s3://fleet/skeletons: cannot list", str(port))


def test_storage_options_reach_fsspec(
    s3_target: Target, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    s3_target.store().put("s", {"probs": P}, kind="t")
    code, out, _ = _run(s3_target.cli("list"), capsys)
    assert code == 0 and [r["tag"] for r in json.loads(out)] == ["v1"]
    seen: list[dict[str, object]] = []
    import skeleton_store._fsspec as fsspec_backend

    real = fsspec_backend.FsspecBackend.__init__

    def spy(self: object, url: str, storage_options: dict[str, object] | None = None) -> None:
        seen.append(dict(storage_options or {}))
        real(self, url, storage_options)  # type: ignore[arg-type]

    monkeypatch.setattr(fsspec_backend.FsspecBackend, "__init__", spy)
    flags = ["--storage-option", "config_kwargs.retries.max_attempts=2"]
    flags += ["--storage-option", "use_ssl=false", "--storage-option", "default_block_size=5242880"]
    code, _, _ = _run(s3_target.cli()[:3] + flags + s3_target.cli()[3:] + ["list"], capsys)
    assert code == 0
    assert seen[-1]["config_kwargs"] == {"retries": {"max_attempts": 2}}
    assert seen[-1]["use_ssl"] is False and seen[-1]["default_block_size"] == 5242880
    assert seen[-1]["client_kwargs"] == s3_target.storage_options["client_kwargs"]  # type: ignore[index]

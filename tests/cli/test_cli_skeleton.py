from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from adapters.cli import main
from adapters.cli._skeleton import parse_storage_option
from guardrail._scores import unigram_log_probs
from guardrail.traces import read_traces
from skeleton_store import SkeletonStore

FIXTURE = str(Path(__file__).parents[1] / "fixtures" / "traces_smollm2_sample.jsonl")


def test_unigram_skeleton_by_hand() -> None:
    log_s = unigram_log_probs([0, 0, 1], 4, smoothing=1.0, floor=0.0)
    np.testing.assert_allclose(np.exp(log_s), [3 / 7, 2 / 7, 1 / 7, 1 / 7])
    floored = np.exp(unigram_log_probs([0], 2, smoothing=0.0, floor=0.5))
    np.testing.assert_allclose(floored, [0.75, 0.25])


def test_build_promote_rollback_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "store")
    base = ["skeleton", "--store", store]
    assert main([*base, "build", "--name", "s", "--traces", FIXTURE, "--kind", "unigram"]) == 0
    uniform = ["build", "--name", "s", "--traces", FIXTURE, "--kind", "uniform"]
    assert main([*base, *uniform, "--risk", "0.95", "--delta", "0.2", "--parent", "v1"]) == 0
    out = capsys.readouterr().out
    assert "wrote s v1 (unigram" in out and "wrote s v2 (uniform" in out and "calibrated" in out
    assert main([*base, "promote", "s", "v2"]) == 0
    assert main([*base, "promote", "s", "v1"]) == 0
    assert main([*base, "rollback", "s"]) == 0
    capsys.readouterr()
    assert main([*base, "diff", "s", "v1", "v2"]) == 0
    diff = json.loads(capsys.readouterr().out)
    v1, v2 = SkeletonStore(store).get("s", 1), SkeletonStore(store).get("s", 2)
    assert diff["tv_distance"] == pytest.approx(0.5 * np.abs(v1.probs() - v2.probs()).sum())
    assert v2.parent == 1 and v2.calibration is not None and v1.calibration is None
    assert SkeletonStore(store).resolve("s", "production") == 2
    vocab = read_traces(FIXTURE, limit=1)[0].vocab_size
    np.testing.assert_allclose(v2.probs(), 1 / vocab)


def test_missing_version_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["skeleton", "--store", str(tmp_path), "show", "nothing", "v3"]) == 1
    assert "error:" in capsys.readouterr().err


def test_vsd_build_and_warm_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch", reason='needs pip install "liftguard[vsd]"')
    base = ["skeleton", "--store", str(tmp_path)]
    assert main([*base, "build", "--name", "v", "--traces", FIXTURE, "--kind", "vsd"]) == 0
    assert main([*base, "warm-start", "v", "--traces", FIXTURE]) == 0
    out = capsys.readouterr().out
    assert "wrote v v1 (vsd, parent None)" in out and "wrote v v2 (vsd, parent 1)" in out
    child = SkeletonStore(str(tmp_path)).get("v", 2)
    assert child.kind == "vsd" and child.vsd_trace is not None
    assert child.probs().sum() == pytest.approx(1.0)


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse usage errors
        return exc.code if isinstance(exc.code, int) else 1


def test_reading_a_store_that_does_not_exist_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "nonexistent")
    assert _exit_code(["skeleton", "--store", missing, "list"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and f"store {missing} does not exist" in captured.err
    assert len(captured.err.splitlines()) == 1 and not Path(missing).exists()
    build = ["build", "--name", "s", "--traces", FIXTURE, "--kind", "uniform"]
    assert main(["skeleton", "--store", missing, *build]) == 0  # a write creates it
    assert main(["skeleton", "--store", missing, "list"]) == 0


def test_storage_options_are_parsed_into_nested_json() -> None:
    options: dict[str, object] = {}
    for text in (
        "anon=true",
        "client_kwargs.endpoint_url=http://127.0.0.1:9000",
        "client_kwargs.region_name=us-east-1",
        'config_kwargs={"connect_timeout": 1}',
        "config_kwargs.retries.max_attempts=1",
        "profile=prod",
        "default_block_size=5242880",
        "token=",
        "requester_pays=null",
        "key=a=b",
    ):
        parse_storage_option(text, options)
    assert options == {
        "anon": True,
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "us-east-1"},
        "config_kwargs": {"connect_timeout": 1, "retries": {"max_attempts": 1}},
        "profile": "prod",
        "default_block_size": 5242880,
        "token": "",
        "requester_pays": None,
        "key": "a=b",
    }


@pytest.mark.parametrize(
    "flags",
    [
        ["noequals"],
        ["=1"],
        ["a..b=1"],
        [".a=1"],
        ["a=1", "a=2"],
        ["a=1", "a.b=2"],
        ["a.b=1", "a.b.c=2"],
    ],
)
def test_a_malformed_storage_option_is_a_usage_error(
    flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["skeleton", "--store", "s3://bucket/x"]
    for flag in flags:
        argv += ["--storage-option", flag]
    assert _exit_code([*argv, "list"]) == 2
    err = capsys.readouterr().err
    assert "--storage-option" in err and flags[-1] in err


def test_storage_options_need_a_store_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["skeleton", "--store", str(tmp_path), "--storage-option", "anon=true", "list"]
    assert _exit_code(argv) == 1
    assert "storage_options apply to fsspec URLs" in capsys.readouterr().err


def test_diff_of_two_certificates_is_a_short_comparison(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dataclasses import replace

    from guardrail import Certificate

    shipped = Path(__file__).parents[2] / "guardrail" / "data" / "smollm2_certificate.json"
    first = Certificate.load(shipped)
    assert first.calibration is not None
    second = replace(
        first,
        tau=first.tau + 0.5,
        context=replace(first.context, temperature=0.7),
        calibration=replace(first.calibration, tau=first.tau + 0.5, risk=0.2, coverage=0.25),
    )
    base = ["skeleton", "--store", str(tmp_path / "store")]
    for i, cert in enumerate((first, second)):
        cert.save(tmp_path / f"c{i}.json")
        assert main([*base, "put", "chat", "--certificate", str(tmp_path / f"c{i}.json")]) == 0
    capsys.readouterr()
    assert main([*base, "diff", "chat", "v1", "v2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "chat v1 -> v2: certificates"
    rows = {line.split()[0]: line for line in lines[1:]}
    assert {"tau", "risk", "coverage", "context", "statistic"} <= set(rows)
    assert f"{first.tau:g} -> {second.tau:g}" in rows["tau"]
    assert f"{first.calibration.risk:g} at delta" in rows["risk"] and "-> 0.2 at" in rows["risk"]
    assert "-> 25.0% of" in rows["coverage"]
    assert rows["context"].split(None, 1)[1] == "temperature 0.0 -> 0.7"
    assert rows["statistic"].endswith("(same)")
    assert len(lines) <= 7 and "null" not in "\n".join(lines)
    assert main([*base, "diff", "chat", "v1", "v2", "--json"]) == 0  # the full diff
    assert json.loads(capsys.readouterr().out)["fields"]["certificate"]

"""The identity of trace data whatever its container: a JSONL file, the same file
compressed and its Parquet twin (``liftguard traces convert``) have one traces digest, so
``calibrate --certificate`` refuses the twin of the data a statistic was fitted on as it
refuses that file (and ``eval`` warns), while other data is accepted; a certificate made
before the digest was recorded is still compared by its file sha256."""

from __future__ import annotations

import gzip
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

from adapters._tracefiles._digest import TraceDigest, same_traces, trace_identity
from adapters._tracefiles._files import trace_file_sha256
from adapters.cli import main
from adapters.tracefiles import open_trace_objects, trace_digest
from guardrail import Certificate

FIXTURES = Path(__file__).parents[1] / "fixtures"
NQ = FIXTURES / "traces_gemma3_nq_sample.jsonl"
TQ = FIXTURES / "traces_gemma3_sample.jsonl"
FITTED_ON = "these are the traces the certificate's statistic was fitted on"


def _convert(source: Path, target: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    assert main(["traces", "convert", str(source), str(target)]) == 0
    capsys.readouterr()
    return target


def _gzip(source: Path, target: Path) -> Path:
    with source.open("rb") as src, gzip.open(target, "wb") as out:
        shutil.copyfileobj(src, out)
    return target


def _rows(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _write(rows: list[dict[str, object]], path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_one_digest_for_the_same_traces_in_any_container(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parquet = _convert(NQ, tmp_path / "nq.parquet", capsys)
    gz = _gzip(NQ, tmp_path / "nq.jsonl.gz")
    spaced = tmp_path / "spaced.jsonl"  # other bytes, keys in another order: the same traces
    spaced.write_text(
        "".join(json.dumps(dict(reversed(r.items())), indent=None) + "\n" for r in _rows(NQ))
    )
    digests = {trace_digest(p) for p in (NQ, parquet, gz, spaced)}
    shas = {trace_file_sha256(p) for p in (NQ, parquet, gz, spaced)}
    assert len(digests) == 1 and len(shas) == 4
    # folded in while reading, as the commands do: the same digest
    folded = TraceDigest()
    for _, obj in open_trace_objects(parquet):
        folded.add(obj)
    assert folded.hexdigest() in digests and folded.count == len(_rows(NQ))
    # another value, another trace order, one trace fewer, an integer for a float: other data
    rows = _rows(NQ)
    first = dict(rows[0])
    first["answer"] = str(first["answer"]) + "!"
    flipped = dict(rows[0])
    flipped["correct"] = not flipped["correct"]
    others = [
        [first, *rows[1:]],
        [flipped, *rows[1:]],
        [rows[1], rows[0], *rows[2:]],
        rows[:-1],
    ]
    for n, changed in enumerate(others):
        assert trace_digest(_write(changed, tmp_path / f"other{n}.jsonl")) not in digests, n
    # an integer where a float of the same value was: other data, as the readers keep it
    with_float, with_int = dict(rows[0]), dict(rows[0])
    with_float["top_k"], with_int["top_k"] = 20.0, 20
    a = trace_digest(_write([with_float], tmp_path / "float.jsonl"))
    assert a != trace_digest(_write([with_int], tmp_path / "int.jsonl"))
    assert a == trace_digest(_convert(tmp_path / "float.jsonl", tmp_path / "float.parquet", capsys))


def test_same_traces_compares_digests_and_old_provenance_by_sha256(tmp_path: Path) -> None:
    nq, tq = trace_identity(NQ), trace_identity(TQ)
    assert set(nq) == {"traces_sha256", "traces_digest"}
    assert same_traces(nq, nq) and not same_traces(nq, tq)
    twin = {"traces_sha256": "0" * 64, "traces_digest": nq["traces_digest"]}
    assert same_traces(nq, twin)  # other bytes, the same traces
    old = {"traces_sha256": nq["traces_sha256"]}  # made before the digest was recorded
    assert same_traces(old, nq) and not same_traces(old, twin) and not same_traces(old, tq)
    assert not same_traces({}, nq)


@pytest.fixture
def fitted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A certificate whose statistic was fitted on ``NQ`` (the JSONL file)."""
    out = tmp_path / "fitted.json"
    args = ["fit", "--traces", str(NQ), "--out", str(out), "--group", "api", "--risk", "0.99"]
    assert main([*args, "--delta", "0.3"]) == 0
    capsys.readouterr()
    return out


def _calibrate(cert: Path, traces: Path, tmp_path: Path, *extra: str) -> list[str]:
    out = tmp_path / "recalibrated.json"
    out.unlink(missing_ok=True)
    return ["calibrate", "--traces", str(traces), "--certificate", str(cert), "--risk", "0.7",
            "--delta", "0.3", "--out", str(out), *extra]  # fmt: skip


def test_calibrate_refuses_the_twin_of_the_fit_data_as_it_refuses_the_file(
    fitted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cert = Certificate.load(fitted)
    assert cert.provenance["traces_digest"] == trace_digest(NQ)
    parquet = _convert(NQ, tmp_path / "nq.parquet", capsys)
    gz = _gzip(NQ, tmp_path / "nq.jsonl.gz")
    refusals = []
    for traces in (NQ, parquet, gz):
        assert main(_calibrate(fitted, traces, tmp_path)) == 1
        err = capsys.readouterr().err.strip()
        refusals.append(err.replace(str(traces), "TRACES"))
    assert len(set(refusals)) == 1 and FITTED_ON in refusals[0] and "\n" not in refusals[0]
    assert not (tmp_path / "recalibrated.json").exists()
    # other data is accepted, in either container; the record names both identities
    tq_parquet = _convert(TQ, tmp_path / "tq.parquet", capsys)
    for traces in (TQ, tq_parquet):
        assert main(_calibrate(fitted, traces, tmp_path)) == 0
        capsys.readouterr()
        after = Certificate.load(tmp_path / "recalibrated.json")
        assert after.provenance["traces_digest"] == trace_digest(TQ)
        assert after.provenance["traces_sha256"] == trace_file_sha256(traces)
        assert after.provenance["fitted_on_digest"] == cert.provenance["traces_digest"]
        assert after.provenance["fitted_on_sha256"] == cert.provenance["traces_sha256"]


def test_a_certificate_without_a_digest_is_compared_by_file_sha256(
    fitted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cert = Certificate.load(fitted)
    old = tmp_path / "old.json"
    provenance = {k: v for k, v in cert.provenance.items() if k != "traces_digest"}
    replace(cert, provenance=provenance).save(old)
    assert main(_calibrate(old, NQ, tmp_path)) == 1  # the same file: refused, as before
    assert FITTED_ON in capsys.readouterr().err
    assert main(_calibrate(old, TQ, tmp_path)) == 0


def test_margins_from_the_twin_of_the_calibration_data_are_refused(
    fitted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    twin = _convert(TQ, tmp_path / "tq.parquet", capsys)
    assert main(_calibrate(fitted, TQ, tmp_path, "--margins-from", str(twin))) == 1
    err = capsys.readouterr().err
    assert "these are the calibration traces" in err and len(err.strip().splitlines()) == 1


def test_eval_warns_of_the_twin_of_the_data_a_certificate_was_made_on(
    fitted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    twin = _convert(NQ, tmp_path / "nq.parquet", capsys)
    warning = "these are the traces the certificate was fitted and calibrated on"
    for traces, warned in ((NQ, True), (twin, True), (TQ, False)):
        assert main(["eval", "--traces", str(traces), "--certificate", str(fitted), "--risk",
                     "0.9", "--splits", "2", "--json"]) == 0  # fmt: skip
        assert (warning in capsys.readouterr().err) is warned, traces


SHIPPED = Path(__file__).parents[2] / "guardrail" / "data"
SHARED_TRACES = Path(__file__).parents[3] / "shared" / "data" / "traces"


@pytest.mark.parametrize("name", sorted(p.name for p in SHIPPED.glob("*certificate*.json")))
def test_every_shipped_certificate_records_its_traces_digest(name: str) -> None:
    """So ``calibrate --certificate`` and ``eval`` recognise a shipped certificate's own
    traces in any container, not only as the very file; checked against the shared traces
    where they are present."""
    provenance = Certificate.load(SHIPPED / name).provenance
    digest = provenance["traces_digest"]
    assert isinstance(digest, str) and len(digest) == 64
    shared = SHARED_TRACES / str(provenance["traces"])
    if shared.exists():
        assert trace_digest(shared) == digest

"""The columnar trace format and the one opener: a Parquet file converted from JSONL reads as
the same objects, every command that reads traces gives the same result on either, from a
local path or from S3 (moto's server), and a damaged Parquet file is one line of error."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")

import pyarrow as pa
import pyarrow.parquet as pq
from s3_server import moto_s3

from adapters.cli import main
from adapters.tracefiles import TraceFileWriter, convert_traces, open_trace_objects
from guardrail import Certificate
from guardrail._errors import TraceFormatError

FIXTURES = Path(__file__).parents[1] / "fixtures"
SAMPLES = sorted(FIXTURES.glob("traces_*.jsonl"))
SMOLLM2 = FIXTURES / "traces_smollm2_sample.jsonl"
GEMMA = FIXTURES / "traces_gemma3_sample.jsonl"
LIFT = Path(__file__).parents[2] / "guardrail" / "data" / "smollm2_certificate.json"


def _objects(path: Path | str) -> list[Any]:
    return [obj for _, obj in open_trace_objects(path)]


def _layout(value: Any) -> Any:
    """``value`` with every object's keys in order (dict equality ignores the order)."""
    if isinstance(value, dict):
        return [(k, _layout(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [_layout(v) for v in value]
    return value


def _parquet(tmp_path: Path, source: Path, **kwargs: Any) -> Path:
    out = tmp_path / f"{source.stem}.parquet"
    convert_traces(str(source), str(out), **kwargs)
    return out


# --- the format ----------------------------------------------------------------------------


@pytest.mark.parametrize("sample", SAMPLES, ids=[p.stem for p in SAMPLES])
def test_a_fixture_converted_to_parquet_reads_as_the_same_objects(
    tmp_path: Path, sample: Path
) -> None:
    jsonl = [json.loads(line) for line in sample.read_text(encoding="utf-8").splitlines()]
    parquet = _parquet(tmp_path, sample)
    assert _layout(_objects(parquet)) == _layout(jsonl)
    back = tmp_path / "back.jsonl"
    convert_traces(str(parquet), str(back))
    assert back.read_bytes() == sample.read_bytes()  # the format's writer: byte for byte


@pytest.mark.parametrize("suffix", [".gz", ".xz", ".bz2"])
def test_compressed_jsonl_reads_as_the_file_it_compresses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    import bz2
    import gzip
    import lzma

    squeeze = {".gz": gzip.compress, ".xz": lzma.compress, ".bz2": bz2.compress}[suffix]
    packed = tmp_path / f"{GEMMA.name}{suffix}"
    packed.write_bytes(squeeze(GEMMA.read_bytes()))
    assert _layout(_objects(packed)) == _layout(_objects(GEMMA))
    runs = [_run(capsys, "eval", "--traces", str(p), "--risk", "0.9", "--splits", "3", "--json")
            for p in (GEMMA, packed)]  # fmt: skip
    assert json.loads(runs[0]) == json.loads(runs[1].replace(str(packed), str(GEMMA)))


def test_parquet_is_written_in_row_groups_and_read_a_batch_at_a_time(tmp_path: Path) -> None:
    objs = _objects(SMOLLM2)
    out = tmp_path / "t.parquet"
    with TraceFileWriter(out, row_group_rows=7) as writer:
        for obj in objs:
            writer.write(obj)
    meta = pq.ParquetFile(out).metadata
    assert meta.num_row_groups == math.ceil(len(objs) / 7)
    numbers, read = zip(*open_trace_objects(out), strict=True)
    assert list(numbers) == list(range(1, len(objs) + 1)) and list(read) == objs


def test_values_no_typed_column_holds_come_back_as_they_were(tmp_path: Path) -> None:
    odd: list[Any] = [
        [1, 2],
        None,
        {"id": "x", "tokens": "not a list"},
        {"id": 7, "correct": "yes", "label_rule": "contains", "vocab_size": 2**64,
         "tokens": [{"text": "a", "logprob": 0, "top": [[1, -0.5]], "logz": {"1.5": 1.0},
                     "extra": {"k": [1]}},
                    {"text": "b", "logprob": -1.0, "top": None, "logz": {"2.0": 1.0},
                     "extra": None}]},
        {"question": "\ud800", "tokens": [{"text": "\udc00", "top": [], "logz": {},
                                           "bytes": [300]}], "x": math.inf},
        {"tokens": [{"a": 1}, {"b": 2}]},
        {"tokens": []},
        {},
        {"id": "t", "tokens": [{"id": None, "text": "", "logprob": None,
                                "top": [[None, None]], "top_text": [""], "bytes": None,
                                "entropy": 1, "logz": None, "prompt_free_logprob": None}]},
    ]  # fmt: skip
    out = tmp_path / "odd.parquet"
    with TraceFileWriter(out) as writer:
        for obj in odd:
            writer.write(obj)
    assert json.dumps(_layout(_objects(out))) == json.dumps(_layout(odd))


def test_a_recording_converted_to_parquet_reads_as_the_same_objects(tmp_path: Path) -> None:
    # a recording's keys: top_text and bytes per token, messages, request, verdict...
    record = {
        "id": "r1", "dataset": "proxy", "model": "m", "question": "q?", "references": [],
        "prompt": "", "answer": "A", "vocab_size": None, "top_k": 2,
        "tokens": [{"id": None, "text": "A", "logprob": -0.1, "top": [[None, -0.1], [None, -3.0]],
                    "top_text": ["A", "B"], "bytes": [65], "entropy": None, "logz": {},
                    "prompt_free_logprob": None}],
        "messages": [{"role": "user", "content": "q?"}], "request": {"model": "m"},
        "finish_reason": None, "complete": False, "verdict": {"state": "blocked", "t": 1},
        "created": "2026-01-01T00:00:00Z",
    }  # fmt: skip
    jsonl = tmp_path / "rec.jsonl"
    jsonl.write_text(json.dumps(record) + "\n" + json.dumps({**record, "id": "r2"}) + "\n")
    assert _layout(_objects(_parquet(tmp_path, jsonl))) == _layout(_objects(jsonl))


# --- errors --------------------------------------------------------------------------------


def _damaged(tmp_path: Path) -> dict[str, Path]:
    good = _parquet(tmp_path, SMOLLM2).read_bytes()
    files = {
        "truncated": good[: len(good) // 2],
        "garbage": b"PAR1" + bytes(range(256)) * 8,
        "middle": good[:100] + bytes(2000) + good[2100:],
    }
    out = {}
    for name, data in files.items():
        out[name] = tmp_path / f"{name}.parquet"
        out[name].write_bytes(data)
    out["schema"] = tmp_path / "schema.parquet"
    pq.write_table(pa.table({"id": ["a"]}), out["schema"])
    return out


def test_a_damaged_or_foreign_parquet_file_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, path in _damaged(tmp_path).items():
        with pytest.raises(TraceFormatError, match=str(path)):
            _objects(path)
        for argv in (
            ["calibrate", "--traces", str(path), "--risk", "0.9"],
            ["monitor", "--traces", str(path), "--certificate", str(LIFT)],
        ):
            assert main(argv) == 1, (name, argv)
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and f"error: {path}" in err, (name, err)


def test_jsonl_errors_are_unchanged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(SMOLLM2.read_bytes().split(b"\n")[0] + b"\n{oops\n")
    assert main(["calibrate", "--traces", str(bad), "--risk", "0.9"]) == 1
    assert f"{bad}:2: invalid JSON" in capsys.readouterr().err


# --- every reading command: the same result from Parquet -----------------------------------


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_calibrate_eval_and_monitor_say_the_same_of_parquet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parquet = str(_parquet(tmp_path, GEMMA))
    results = []
    for traces in (str(GEMMA), parquet):
        cal = tmp_path / "cal.json"
        _run(capsys, "calibrate", "--traces", traces, "--risk", "0.9", "--delta", "0.1",
             "--score", "min_logprob", "--out", str(cal))  # fmt: skip
        ev = _run(capsys, "eval", "--traces", traces, "--risk", "0.9", "--splits", "3", "--json")
        mon = json.loads(_run(capsys, "monitor", "--traces", traces, "--certificate", str(LIFT),
                              "--json", "--vocab-size", "262144"))  # fmt: skip
        mon = json.loads(json.dumps(mon).replace(traces, "TRACES"))  # where: file:line or row
        results.append((json.loads(cal.read_text()), json.loads(ev), mon))
    assert results[0] == results[1]


def test_fit_fits_the_same_certificate_on_parquet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parquet = str(_parquet(tmp_path, GEMMA))
    certs = []
    for traces in (str(GEMMA), parquet):
        out = tmp_path / "cert.json"
        _run(capsys, "fit", "--traces", traces, "--out", str(out), "--risk", "0.95",
             "--delta", "0.2")  # fmt: skip
        cert = Certificate.load(out).to_dict()
        cert["provenance"].pop("command")
        cert["provenance"].pop("traces_sha256")  # the file's bytes: not the same file
        # (the traces digest, compared below, is the same: the same traces)
        certs.append(json.loads(json.dumps(cert).replace(Path(traces).name, "TRACES")))
    assert certs[0] == certs[1]


def test_label_labels_parquet_as_jsonl_and_writes_either(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refs = tmp_path / "refs.jsonl"
    rows = [{"id": o["id"], "answer": o["references"]} for o in _objects(SMOLLM2)]
    refs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    unlabelled = [{k: v for k, v in o.items() if k != "correct"} for o in _objects(SMOLLM2)]
    raw = tmp_path / "raw.jsonl"
    raw.write_text("".join(json.dumps(o, ensure_ascii=False) + "\n" for o in unlabelled))
    raw_parquet = _parquet(tmp_path, raw)
    outs = []
    for source, out in ((raw, "a.jsonl"), (raw_parquet, "b.jsonl"), (raw, "c.parquet")):
        main(["traces", "label", "--traces", str(source), "--references", str(refs),
              "--out", str(tmp_path / out)])  # fmt: skip
        assert "labelled 40 of 40" in capsys.readouterr().err
        outs.append(_layout(_objects(tmp_path / out)))
    assert outs[0] == outs[1] == outs[2]


def test_commands_read_traces_from_s3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with moto_s3("liftguard-traces") as (_, url, options):
        flags = ["--storage-option=key=testing", "--storage-option=secret=testing",
                 f"--storage-option=client_kwargs.endpoint_url="
                 f"{options['client_kwargs']['endpoint_url']}"]  # fmt: skip
        for name in ("t.jsonl", "t.parquet"):
            _run(capsys, "traces", "convert", str(GEMMA), f"{url}/{name}", *flags)
        local = _run(capsys, "eval", "--traces", str(GEMMA), "--risk", "0.9", "--splits", "2")
        for name in ("t.jsonl", "t.parquet"):  # fsspec's defaults: AWS_ENDPOINT_URL
            remote = _run(capsys, "eval", "--traces", f"{url}/{name}", "--risk", "0.9",
                          "--splits", "2")  # fmt: skip
            assert remote.replace(f"{url}/{name}", str(GEMMA)) == local
        assert main(["eval", "--traces", f"{url}/missing.parquet", "--risk", "0.9"]) == 1
        assert "missing.parquet" in capsys.readouterr().err

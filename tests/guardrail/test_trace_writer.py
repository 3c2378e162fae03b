"""The one writer of trace lines (``guardrail.traces._write``): ``traces generate``
(``dump_trace_line``), the proxy's recorder (``record_line``) and ``traces label``
(``label_line``) write the same answer the same way wherever the format says how.

The byte-for-byte round trip of the shared traces is checked in ``test_traces.py``, the
recorder's line format in ``test_recorded_traces.py`` and ``tests/proxy``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from adapters.cli import main
from guardrail._trace_format import _TOKEN_KEYS, _TOP_LEVEL_KEYS
from guardrail.traces import Trace, dump_trace_line, parse_trace, read_traces
from guardrail.traces._write import label_line, token_object, trace_line, trace_object

pytest.importorskip("prometheus_client")  # the recorder counts drops in the proxy's metrics

from adapters._proxy._recording import AnswerRecord, record_line

GEMMA = Path(__file__).resolve().parents[1] / "fixtures" / "traces_gemma3_sample.jsonl"
API_MISSING = {"token_ids", "top_ids", "entropy", "logz", "prompt_free_logprobs", "vocab_size"}


def _recorded(trace: Trace) -> str:
    """The recorder's line of ``trace``'s answer as an OpenAI-style stream carries it."""
    entries = [
        {"token": text, "logprob": lp, "bytes": list(text.encode()),
         "top_logprobs": [{"token": f"<{a}>", "logprob": b} for a, b in zip(ids, lps, strict=True)]}
        for text, lp, ids, lps in zip(trace.token_texts, trace.logprobs.tolist(),
                                      trace.top_ids.tolist(), trace.top_logprobs.tolist(),
                                      strict=True)
    ]  # fmt: skip
    record = AnswerRecord(
        request_id=trace.id, model_id=trace.model, vocab_size=None, top_k=trace.top_k,
        messages=[{"role": "user", "content": trace.question}], settings={"model": "m"},
        text=list(trace.token_texts), entries=entries, finish_reason="stop", complete=True,
        verdict={"state": "certified"}, created=1_700_000_000.0,
    )  # fmt: skip
    return record_line(record, trace.dataset)


def _labelled_by_cli(line: str, trace: Trace, tmp_path: Path) -> str:
    rec, refs, out = tmp_path / "rec.jsonl", tmp_path / "refs.jsonl", tmp_path / "lab.jsonl"
    rec.write_text(line + "\n", encoding="utf-8")
    refs.write_text(
        json.dumps({"id": trace.id, "references": list(trace.references)}) + "\n",
        encoding="utf-8",
    )
    argv = ["traces", "label", "--traces", str(rec), "--references", str(refs), "--out", str(out)]
    assert main(argv) == 0
    (labelled,) = out.read_text(encoding="utf-8").splitlines()
    return labelled


def _documented(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without the keys the format does not name (top level and per token)."""
    out = {k: v for k, v in obj.items() if k in _TOP_LEVEL_KEYS}
    out["tokens"] = [{k: v for k, v in t.items() if k in _TOKEN_KEYS} for t in obj["tokens"]]
    return out


@pytest.mark.parametrize("index", [3, 12])  # a wrong and a right answer
def test_the_three_paths_write_one_answer_alike(index: int, tmp_path: Path) -> None:
    original = read_traces(GEMMA)[index]
    # a question with non-ASCII text, so that every path shows its encoding
    trace = dataclasses.replace(original, question=original.question + " (Zürich?)")
    generated = dump_trace_line(trace)
    recorded = _recorded(trace)
    labelled = _labelled_by_cli(recorded, trace, tmp_path)
    for line in (generated, recorded, labelled):
        assert "Zürich" in line and "\\u" not in line  # UTF-8 text, not escaped

    # What an API stream carries is the trace with the fields a stream lacks written as
    # the format's nulls and the recorder's prompt; then the labeller adds the references
    # and the label.
    as_streamed = dataclasses.replace(
        trace, prompt="", vocab_size=0, logz={}, missing=frozenset(API_MISSING)
    )
    unlabelled = dataclasses.replace(as_streamed, correct=None, references=())
    assert dump_trace_line(unlabelled) == json.dumps(
        _documented(json.loads(recorded)), ensure_ascii=False
    )
    assert dump_trace_line(as_streamed) == json.dumps(
        _documented(json.loads(labelled)), ensure_ascii=False
    )
    # ... and reads back as that trace, whichever path wrote it
    again = parse_trace(json.loads(labelled))
    assert again.missing == API_MISSING and again.correct is original.correct
    assert dump_trace_line(again) == dump_trace_line(as_streamed)

    # The documented keys come in the documented order on every path, the label right
    # after the answer; the recorder's own keys after them.
    keys = [list(json.loads(line)) for line in (generated, recorded, labelled)]
    assert keys[0] == list(_TOP_LEVEL_KEYS)
    assert keys[1][: len(_TOP_LEVEL_KEYS) - 1] == [k for k in _TOP_LEVEL_KEYS if k != "correct"]
    assert keys[2][: len(_TOP_LEVEL_KEYS)] == list(_TOP_LEVEL_KEYS)
    token_keys = list(json.loads(recorded)["tokens"][0])
    assert token_keys == ["id", "text", "logprob", "top", "top_text", "bytes", "entropy",
                          "logz", "prompt_free_logprob"]  # fmt: skip

    # Relabelling a generated line with its own label reproduces it byte for byte; with
    # the other label, only the label changes.
    obj = json.loads(generated)
    assert label_line(obj, trace.correct) == generated
    flipped = label_line(obj, not trace.correct)
    assert json.loads(flipped) == {**obj, "correct": not trace.correct}
    assert list(json.loads(flipped)) == list(obj)


def test_a_new_line_from_the_documented_fields() -> None:
    tok = token_object(" Zürich", -0.5, [(None, -0.5), (None, -1.0)], extra={"bytes": None})
    assert tok == {
        "id": None, "text": " Zürich", "logprob": -0.5, "top": [[None, -0.5], [None, -1.0]],
        "bytes": None, "entropy": None, "logz": {}, "prompt_free_logprob": None,
    }  # fmt: skip
    assert token_object("a", -1.0, [], logz={2: -0.1, "1.5": -0.2})["logz"] == {
        "2.0": -0.1, "1.5": -0.2,
    }  # fmt: skip
    fields: dict[str, Any] = dict(
        id="r1", dataset="d", model="m", question="q", references=("x",), prompt="",
        answer="a", vocab_size=None, top_k=2, tokens=[tok],
    )  # fmt: skip
    unlabelled = trace_object(correct=None, extra={"note": object}, **fields)
    assert "correct" not in unlabelled and list(unlabelled)[-1] == "note"
    line = trace_line(unlabelled)
    assert '"note": "<class \'object\'>"' in line and '"vocab_size": null' in line
    labelled = trace_object(correct=True, **fields)
    assert list(labelled) == list(_TOP_LEVEL_KEYS)
    # the label goes where relabelling a line puts it
    assert trace_line(labelled) == label_line(trace_object(correct=None, **fields), True)
    with pytest.raises(ValueError):  # a new line never holds NaN
        trace_line(trace_object(correct=None, extra={"x": float("nan")}, **fields))


def test_a_line_read_back_is_written_back_as_read() -> None:
    obj = {"answer": "a", "question": "q", "correct": False, "tokens": [], "v": float("nan")}
    assert label_line(obj, None) == (
        '{"answer": "a", "question": "q", "correct": false, "tokens": [], "v": NaN}'
    )
    assert label_line(obj, True) == (
        '{"answer": "a", "correct": true, "question": "q", "tokens": [], "v": NaN}'
    )
    assert label_line({"tokens": []}, True) == '{"tokens": [], "correct": true}'

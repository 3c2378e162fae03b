"""Tests for the JSONL trace reader and writer (guardrail.traces._read)."""

from __future__ import annotations

import copy
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from guardrail._errors import GuardrailError, TraceFormatError
from guardrail.traces._read import (
    CENSORED_LOGPROB,
    Trace,
    dump_trace_line,
    iter_traces,
    parse_trace,
    parse_trace_lines,
    read_traces,
    trace_to_dict,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GEMMA = FIXTURES / "traces_gemma3_sample.jsonl"
SMOLLM = FIXTURES / "traces_smollm2_sample.jsonl"

TOP_KEYS = [
    "id",
    "dataset",
    "model",
    "question",
    "references",
    "prompt",
    "answer",
    "correct",
    "vocab_size",
    "top_k",
    "tokens",
]
TOKEN_KEYS = ["id", "text", "logprob", "top", "entropy", "logz", "prompt_free_logprob"]


def _shared_traces_dir() -> Path | None:
    """The shared trace data (``<repo>/../shared/data/traces``), if present."""
    env = os.environ.get("LIFTGUARD_TRACES_DIR")
    if env:
        return Path(env)
    parents = Path(__file__).resolve().parents
    if len(parents) < 4:
        return None
    candidate = parents[3] / "shared" / "data" / "traces"
    return candidate if candidate.is_dir() else None


def _first_obj(path: Path = GEMMA) -> dict[str, Any]:
    with path.open(encoding="utf-8") as fh:
        obj: dict[str, Any] = json.loads(fh.readline())
    return obj


def _parse_one(obj: Any) -> Trace:
    return parse_trace(obj, source="mem", line=7)


def _assert_same(a: Trace, b: Trace) -> None:
    for name in ("id", "dataset", "model", "question", "references", "prompt", "answer"):
        assert getattr(a, name) == getattr(b, name)
    assert (a.correct, a.vocab_size, a.top_k) == (b.correct, b.vocab_size, b.top_k)
    assert a.token_texts == b.token_texts
    for name in (
        "token_ids",
        "logprobs",
        "top_ids",
        "top_logprobs",
        "entropy",
        "prompt_free_logprobs",
    ):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)
    assert list(a.logz) == list(b.logz)
    for t in a.logz:
        np.testing.assert_array_equal(a.logz[t], b.logz[t])


# --------------------------------------------------------------------------- #
# The committed fixtures
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("path", "model", "vocab", "n_correct"),
    [
        (GEMMA, "gemma3-270m-q4_k_m", 262144, 8),
        (SMOLLM, "smollm2-135m-instruct-q4_1", 49152, 4),
    ],
)
def test_fixture_parses(path: Path, model: str, vocab: int, n_correct: int) -> None:
    traces = read_traces(path)
    assert len(traces) == 40
    assert [t.id for t in traces] == [f"triviaqa-{50 * i}" for i in range(40)]
    assert sum(t.correct is True for t in traces) == n_correct
    assert sum(t.correct is False for t in traces) == 40 - n_correct
    for tr in traces:
        assert tr.model == model and tr.dataset == "triviaqa"
        assert tr.vocab_size == vocab and tr.top_k == 20
        n = tr.n_tokens
        assert 1 <= n <= 24
        assert len(tr.references) > 0
        assert len(tr.token_texts) == n
        assert tr.token_ids.shape == tr.logprobs.shape == tr.entropy.shape == (n,)
        assert tr.prompt_free_logprobs.shape == (n,)
        assert tr.top_ids.shape == tr.top_logprobs.shape == (n, 20)
        assert tr.token_ids.dtype == np.int64 and tr.top_ids.dtype == np.int64
        assert tr.logprobs.dtype == np.float64 and tr.top_logprobs.dtype == np.float64
        assert sorted(tr.logz) == [1.5, 2.0]
        # Greedy decoding: the top alternative is the emitted token.
        np.testing.assert_array_equal(tr.top_ids[:, 0], tr.token_ids)
        np.testing.assert_array_equal(tr.top_logprobs[:, 0], tr.logprobs)
        assert np.all(np.diff(tr.top_logprobs, axis=1) <= 0)
        assert np.all(tr.entropy >= 0)
        assert np.all(tr.logprobs <= 0) and np.all(tr.prompt_free_logprobs <= 0)
        for temp, lz in tr.logz.items():
            assert lz.shape == (n,) and lz.dtype == np.float64
            upper = (1 - 1 / temp) * math.log(vocab)
            assert np.all(lz >= 0) and np.all(lz <= upper + 1e-6)
        # The answer is the stripped concatenation of the token pieces (for
        # answers without partial multi-byte characters).
        joined = "".join(tr.token_texts)
        if "\ufffd" not in joined:
            assert joined.strip() == tr.answer


def test_arrays_are_read_only() -> None:
    tr = read_traces(GEMMA, limit=1)[0]
    arrays = [tr.token_ids, tr.logprobs, tr.top_ids, tr.top_logprobs, tr.entropy]
    arrays += [tr.prompt_free_logprobs, *tr.logz.values()]
    for arr in arrays:
        assert not arr.flags.writeable
        with pytest.raises(ValueError):
            arr[0] = 0
    with pytest.raises(AttributeError):
        tr.answer = "x"  # type: ignore[misc]


def test_truncate_top() -> None:
    tr = read_traces(SMOLLM, limit=1)[0]
    small = tr.truncate_top(5)
    assert small.top_k == 5
    assert small.top_ids.shape == small.top_logprobs.shape == (tr.n_tokens, 5)
    np.testing.assert_array_equal(small.top_ids, tr.top_ids[:, :5])
    np.testing.assert_array_equal(small.top_logprobs, tr.top_logprobs[:, :5])
    assert not small.top_ids.flags.writeable
    assert tr.top_ids.shape[1] == 20 and tr.top_k == 20
    assert small.token_ids is tr.token_ids
    assert tr.truncate_top(50).top_ids.shape[1] == 20
    # A truncated trace is still valid and round-trips.
    again = parse_trace(json.loads(dump_trace_line(small)))
    _assert_same(small, again)
    with pytest.raises(ValueError):
        tr.truncate_top(-1)


PROSE = ("question", "references", "prompt", "answer")


def test_compact_keeps_what_scores_read_and_drops_the_prose() -> None:
    for full in read_traces(SMOLLM):
        small = full.compact()
        kept, whole = trace_to_dict(small), trace_to_dict(full)
        assert [kept.pop(k) for k in PROSE] == ["", [], "", ""]
        assert kept == {k: v for k, v in whole.items() if k not in PROSE}
        assert small.missing == full.missing and small.logz == full.logz
        assert small.token_ids is full.token_ids and small.top_logprobs is full.top_logprobs


def test_repeated_strings_are_held_once() -> None:
    a, b = read_traces(SMOLLM, limit=2)
    common = set(a.token_texts) & set(b.token_texts)
    assert common  # the sample's answers share tokens
    for text in common:
        assert a.token_texts[a.token_texts.index(text)] is b.token_texts[b.token_texts.index(text)]
    assert a.model is b.model and a.dataset is b.dataset
    assert a.missing is b.missing  # nothing missing: one empty set


def test_limit_and_iter() -> None:
    assert len(read_traces(GEMMA, limit=3)) == 3
    assert read_traces(GEMMA, limit=0) == []
    it = iter_traces(GEMMA)
    assert next(it).id == "triviaqa-0"
    with pytest.raises(ValueError):
        iter_traces(GEMMA, limit=-1)
    with pytest.raises(ValueError):
        parse_trace_lines([], limit=-1)


def test_parse_trace_lines_in_memory() -> None:
    text = GEMMA.read_text(encoding="utf-8")
    from_str = list(parse_trace_lines(text))
    from_lines = list(parse_trace_lines(text.splitlines(keepends=True)))
    assert len(from_str) == len(from_lines) == 40
    _assert_same(from_str[5], from_lines[5])


# --------------------------------------------------------------------------- #
# Round trip
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("path", [GEMMA, SMOLLM])
def test_round_trip(path: Path, tmp_path: Path) -> None:
    traces = read_traces(path)
    lines = [dump_trace_line(t) for t in traces]
    # The writer reproduces the source lines byte for byte.
    assert "\n".join(lines) + "\n" == path.read_text(encoding="utf-8")
    out = tmp_path / "out.jsonl"
    out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    again = read_traces(out)
    assert len(again) == len(traces)
    for a, b in zip(traces, again, strict=True):
        _assert_same(a, b)
        assert trace_to_dict(a) == trace_to_dict(b)


def test_trace_to_dict_key_order() -> None:
    d = trace_to_dict(read_traces(GEMMA, limit=1)[0])
    assert list(d) == TOP_KEYS
    assert list(d["tokens"][0]) == TOKEN_KEYS
    assert list(d["tokens"][0]["logz"]) == ["1.5", "2.0"]
    assert d == _first_obj()


# --------------------------------------------------------------------------- #
# Malformed input
# --------------------------------------------------------------------------- #


def test_invalid_json_names_file_and_line(tmp_path: Path) -> None:
    good = GEMMA.read_text(encoding="utf-8").splitlines()[0]
    path = tmp_path / "bad.jsonl"
    path.write_text(f"{good}\n\n{good[:-10]}\n{good}\n", encoding="utf-8")
    with pytest.raises(TraceFormatError) as info:
        read_traces(path)
    err = info.value
    assert err.line == 3 and err.source == str(path)
    assert f"{path}:3" in str(err) and "invalid JSON" in str(err)
    assert isinstance(err, ValueError) and isinstance(err, GuardrailError)


def test_invalid_utf8_names_line(tmp_path: Path) -> None:
    good = GEMMA.read_bytes().splitlines()[0]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(good + b"\n" + good.replace(b"Lloyd", b"Ll\xffyd") + b"\n")
    with pytest.raises(TraceFormatError, match=r":2: invalid UTF-8"):
        read_traces(path)


def test_missing_file() -> None:
    with pytest.raises(FileNotFoundError):
        read_traces("/nonexistent/traces.jsonl")


def test_directory_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        read_traces(tmp_path)


def test_utf8_bom_is_skipped(tmp_path: Path) -> None:
    """A byte-order mark (as some editors write) is skipped; only at the start."""
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + GEMMA.read_bytes())
    for a, b in zip(read_traces(path), read_traces(GEMMA), strict=True):
        assert trace_to_dict(a) == trace_to_dict(b)
    line = GEMMA.read_text(encoding="utf-8").splitlines()[0]
    assert len(list(parse_trace_lines("\ufeff" + line))) == 1
    with pytest.raises(TraceFormatError, match=r"mem:2: invalid JSON"):
        list(parse_trace_lines([line, "\ufeff" + line], source="mem"))


def test_deeply_nested_json_is_a_format_error() -> None:
    with pytest.raises(TraceFormatError, match=r"mem:1: invalid JSON: nested too deeply"):
        list(parse_trace_lines(["[" * 100_000 + "]" * 100_000], source="mem"))


def test_not_an_object() -> None:
    with pytest.raises(TraceFormatError, match="expected a JSON object, got array"):
        list(parse_trace_lines(["[1, 2]"]))


@pytest.mark.parametrize("key", [k for k in TOP_KEYS if k != "vocab_size"])  # see below
def test_missing_top_level_key(key: str) -> None:
    obj = _first_obj()
    del obj[key]
    with pytest.raises(TraceFormatError, match=f"mem:7: missing required key '{key}'"):
        _parse_one(obj)


@pytest.mark.parametrize("key", TOKEN_KEYS)
def test_missing_token_key(key: str) -> None:
    obj = _first_obj()
    del obj["tokens"][2][key]
    # what an API stream lacks may be absent, but for every token or for none
    # (tests/guardrail/test_recorded_traces.py); the rest is required
    pattern = (
        rf"tokens\[2\]: missing required key '{key}'"
        if key in ("text", "logprob", "top")
        else r"tokens\[2\]\.logz: temperature keys \[\] differ from those of tokens\[0\]"
        if key == "logz"
        else rf"tokens\[2\]\.{key}: null or absent, but tokens\[0\]\.{key} is given"
    )
    with pytest.raises(TraceFormatError, match=pattern):
        _parse_one(obj)


def test_missing_label_allowed_when_not_required(tmp_path: Path) -> None:
    obj = _first_obj()
    del obj["correct"]
    path = tmp_path / "unlabeled.jsonl"
    path.write_text(json.dumps(obj) + "\n", encoding="utf-8")
    with pytest.raises(TraceFormatError, match="missing required key 'correct'"):
        read_traces(path)
    (tr,) = read_traces(path, require_label=False)
    assert tr.correct is None
    assert "correct" not in trace_to_dict(tr)
    # A present label must still be a boolean.
    obj["correct"] = 1
    with pytest.raises(TraceFormatError, match="correct: expected a boolean, got integer"):
        parse_trace(obj, require_label=False)


@pytest.mark.parametrize(
    ("mutate", "pattern"),
    [
        (lambda o: o.update(correct="yes"), r"correct: expected a boolean, got string"),
        (lambda o: o.update(question=None), r"question: expected a string, got null"),
        (lambda o: o.update(references="Paris"), r"references: expected an array"),
        (lambda o: o["references"].append(3), r"references\[9\]: expected a string"),
        (lambda o: o.update(vocab_size=262144.0), r"vocab_size: expected an integer, got number"),
        (lambda o: o.update(vocab_size=0), r"vocab_size: expected an integer >= 1, got 0"),
        (lambda o: o.update(top_k=True), r"top_k: expected an integer, got boolean"),
        (lambda o: o.update(tokens={}), r"tokens: expected an array, got object"),
        (lambda o: o["tokens"].append("x"), r"tokens\[5\]: expected an object, got string"),
        (lambda o: o["tokens"][1].update(id=76089.0), r"tokens\[1\]\.id: expected an integer"),
        (lambda o: o["tokens"][1].update(id=True), r"tokens\[1\]\.id: expected an integer"),
        (lambda o: o["tokens"][1].update(text=5), r"tokens\[1\]\.text: expected a string"),
        (
            lambda o: o["tokens"][3].update(logprob="-0.1"),
            r"tokens\[3\]\.logprob: expected a number, got string",
        ),
        (
            lambda o: o["tokens"][0].update(entropy=False),
            r"tokens\[0\]\.entropy: expected a number, got boolean",
        ),
        (lambda o: o["tokens"][0].update(top=None), r"tokens\[0\]\.top: expected an array"),
        (
            lambda o: o["tokens"][0]["top"].__setitem__(4, [5, -1.0, 0]),
            r"tokens\[0\]\.top\[4\]: expected a \[token_id, logprob\] pair",
        ),
        (
            lambda o: o["tokens"][1]["top"][6].__setitem__(0, "562"),
            r"tokens\[1\]\.top\[6\]\[0\]: expected an integer, got string",
        ),
        (
            lambda o: o["tokens"][1]["top"][6].__setitem__(1, None),
            r"tokens\[1\]\.top\[6\]\[1\]: expected a number, got null",
        ),
        (lambda o: o["tokens"][2].update(logz=[1.0]), r"tokens\[2\]\.logz: expected an object"),
        (
            lambda o: o["tokens"][2]["logz"].update({"2.0": "x"}),
            r"tokens\[2\]\.logz\.2\.0: expected a number, got string",
        ),
    ],
)
def test_wrong_type(mutate: Any, pattern: str) -> None:
    obj = _first_obj()
    mutate(obj)
    with pytest.raises(TraceFormatError, match=pattern):
        _parse_one(obj)


def test_nan_logprob() -> None:
    line = dump_trace_line(read_traces(GEMMA, limit=1)[0])
    bad = line.replace('"logprob": -0.115806', '"logprob": NaN', 1)
    assert bad != line
    with pytest.raises(TraceFormatError) as info:
        list(parse_trace_lines(["", bad], source="x.jsonl"))
    assert str(info.value) == (
        "x.jsonl:2: tokens[2].logprob: expected a finite log-probability <= 0, got NaN"
    )


@pytest.mark.parametrize(
    ("field", "value", "pattern"),
    [
        ("logprob", math.inf, r"tokens\[1\]\.logprob: .* got Infinity"),
        ("logprob", 0.5, r"tokens\[1\]\.logprob: .* <= 0, got 0\.5"),
        ("prompt_free_logprob", -math.inf, r"prompt_free_logprob: .* got -Infinity"),
        ("entropy", math.nan, r"tokens\[1\]\.entropy: expected a finite entropy >= 0, got NaN"),
        ("entropy", -0.5, r"tokens\[1\]\.entropy: .* got -0\.5"),
    ],
)
def test_bad_numbers(field: str, value: float, pattern: str) -> None:
    obj = _first_obj()
    obj["tokens"][1][field] = value
    with pytest.raises(TraceFormatError, match=pattern):
        _parse_one(obj)


def test_rounding_tolerance_accepted() -> None:
    obj = _first_obj()
    obj["tokens"][1]["prompt_free_logprob"] = 1e-7
    obj["tokens"][1]["entropy"] = -1e-7
    tr = _parse_one(obj)
    assert tr.prompt_free_logprobs[1] == 1e-7


@pytest.mark.parametrize(
    ("where", "path"),
    [
        (("logprob",), r"tokens\[1\]\.logprob"),
        (("prompt_free_logprob",), r"tokens\[1\]\.prompt_free_logprob"),
        (("top", 19, 1), r"tokens\[1\]\.top\[19\]\[1\]"),
    ],
)
def test_censored_logprob(where: tuple[Any, ...], path: str) -> None:
    obj = _first_obj()
    target: Any = obj["tokens"][1]
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = CENSORED_LOGPROB
    with pytest.raises(TraceFormatError, match=rf"{path}: censored log-probability -9999\.0"):
        _parse_one(obj)


def test_top_out_of_order() -> None:
    obj = _first_obj()
    top = obj["tokens"][0]["top"]
    top[3], top[4] = top[4], top[3]
    with pytest.raises(TraceFormatError) as info:
        _parse_one(obj)
    msg = str(info.value)
    assert "tokens[0].top: alternatives are not in non-increasing order" in msg
    assert "top[4]" in msg and "top[3]" in msg


def test_top_longer_than_top_k_and_ragged() -> None:
    obj = _first_obj()
    obj["top_k"] = 10
    with pytest.raises(TraceFormatError, match=r"tokens\[0\]\.top: has 20 entries, more than"):
        _parse_one(obj)
    obj = _first_obj()
    obj["tokens"][3]["top"].pop()
    with pytest.raises(TraceFormatError, match=r"tokens\[3\]\.top: has 19 entries but"):
        _parse_one(obj)


def test_fewer_alternatives_than_top_k() -> None:
    obj = _first_obj()
    for tok in obj["tokens"]:
        del tok["top"][5:]
    tr = _parse_one(obj)
    assert tr.top_k == 20 and tr.top_ids.shape == (tr.n_tokens, 5)


@pytest.mark.parametrize(
    ("mutate", "pattern"),
    [
        (lambda o: o["tokens"][4].update(id=262144), r"tokens\[4\]\.id: token id 262144 outside"),
        (lambda o: o["tokens"][4].update(id=-1), r"tokens\[4\]\.id: token id -1 outside"),
        (lambda o: o["tokens"][4].update(id=2**70), r"tokens\[4\]\.id: token id \d+ outside"),
        (
            lambda o: o["tokens"][2]["top"][7].__setitem__(0, 300000),
            r"tokens\[2\]\.top\[7\]\[0\]: token id 300000 outside \[0, vocab_size=262144\)",
        ),
        (
            lambda o: o["tokens"][2]["top"][7].__setitem__(0, -(2**64)),
            r"tokens\[2\]\.top\[7\]\[0\]: token id -\d+ outside",
        ),
    ],
)
def test_token_id_out_of_range(mutate: Any, pattern: str) -> None:
    obj = _first_obj()
    mutate(obj)
    with pytest.raises(TraceFormatError, match=pattern):
        _parse_one(obj)


@pytest.mark.parametrize(
    ("mutate", "pattern"),
    [
        (
            lambda o: o["tokens"][1]["logz"].update({"2.0": math.inf}),
            r"tokens\[1\]\.logz\.2\.0: expected a finite log-normalizer, got Infinity",
        ),
        (
            lambda o: o["tokens"][0].update(logz={"hot": 1.0, "2.0": 1.0}),
            r"tokens\[0\]\.logz: temperature key 'hot' is not a number",
        ),
        (
            lambda o: o["tokens"][0].update(logz={"-1": 1.0, "2.0": 1.0}),
            r"temperature key '-1' is not a finite positive number",
        ),
        (
            lambda o: o["tokens"][3]["logz"].pop("1.5"),
            r"tokens\[3\]\.logz: temperature keys \['2\.0'\] differ",
        ),
    ],
)
def test_bad_logz(mutate: Any, pattern: str) -> None:
    obj = _first_obj()
    mutate(obj)
    with pytest.raises(TraceFormatError, match=pattern):
        _parse_one(obj)


def test_error_after_valid_lines_reports_its_line(tmp_path: Path) -> None:
    lines = GEMMA.read_text(encoding="utf-8").splitlines()[:4]
    obj = json.loads(lines[3])
    obj["tokens"][0]["logprob"] = math.nan
    lines[3] = json.dumps(obj)
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    it = iter_traces(path)
    assert [next(it).id for _ in range(3)] == ["triviaqa-0", "triviaqa-50", "triviaqa-100"]
    with pytest.raises(TraceFormatError, match=r":4: tokens\[0\]\.logprob: .* got NaN"):
        next(it)


# --------------------------------------------------------------------------- #
# Edge cases
# --------------------------------------------------------------------------- #


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    assert read_traces(path) == []
    path.write_text("\n  \n\n", encoding="utf-8")
    assert read_traces(path) == []


def test_empty_answer() -> None:
    obj = _first_obj()
    obj["answer"] = ""
    obj["tokens"] = []
    tr = _parse_one(obj)
    assert tr.n_tokens == 0 and tr.answer == "" and tr.token_texts == ()
    assert tr.token_ids.shape == tr.logprobs.shape == tr.entropy.shape == (0,)
    assert tr.prompt_free_logprobs.shape == (0,)
    assert tr.top_ids.shape == tr.top_logprobs.shape == (0, 20)
    assert all(v.shape == (0,) for v in tr.logz.values())
    d = trace_to_dict(tr)
    assert d == obj
    _assert_same(tr, parse_trace(json.loads(dump_trace_line(tr))))
    assert tr.truncate_top(3).top_ids.shape == (0, 3)


def test_extra_keys_ignored() -> None:
    obj = _first_obj()
    obj["note"] = "extra"
    obj["tokens"][0]["bytes"] = [1, 2]
    tr = _parse_one(obj)
    assert trace_to_dict(tr) == _first_obj()


def test_direct_construction_is_checked() -> None:
    tr = read_traces(GEMMA, limit=1)[0]
    kwargs = {f: getattr(tr, f) for f in Trace.__dataclass_fields__}
    bad = copy.copy(kwargs)
    bad["logprobs"] = np.zeros(tr.n_tokens + 1)
    with pytest.raises(TraceFormatError, match="logprobs: has 6 entries"):
        Trace(**bad)
    ok = copy.copy(kwargs)
    mine = np.array(tr.logprobs)
    ok["logprobs"] = mine
    built = Trace(**ok)
    assert not built.logprobs.flags.writeable
    assert mine.flags.writeable  # the caller's array is copied, not frozen


# --------------------------------------------------------------------------- #
# The full shared data, when present
# --------------------------------------------------------------------------- #


def test_full_shared_gemma3_file() -> None:
    shared = _shared_traces_dir()
    path = shared / "triviaqa_gemma3.jsonl" if shared is not None else None
    if path is None or not path.is_file():
        pytest.skip("shared trace data not available")
    traces = read_traces(path)
    assert len(traces) == 2000
    assert [t.id for t in traces[:3]] == ["triviaqa-0", "triviaqa-1", "triviaqa-2"]
    assert traces[-1].id == "triviaqa-1999"
    assert all(t.vocab_size == 262144 and t.top_ids.shape[1] == 20 for t in traces)
    assert 0 < sum(bool(t.correct) for t in traces) < 2000

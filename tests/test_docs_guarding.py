"""docs/guarding-code-and-reasoning.md works from a clone: its commands install from the
clone (liftguard is not on PyPI), read no file from outside it, and the labelled traces
the repository ships are named where a command reads them, at paths that exist."""

from __future__ import annotations

import re

from markdown_blocks import ROOT, blocks

PAGE = ROOT / "docs" / "guarding-code-and-reasoning.md"
SHIPPED = re.compile(r"benchmarks/traces/[\w./-]+")


def _commands() -> str:
    return "".join(b.text for b in blocks(PAGE) if b.lang in ("console", "bash"))


def test_the_page_installs_from_a_clone() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert 'pip install "liftguard[' not in text  # not on PyPI
    assert '$ pip install -e ".[qwen]"' in _commands()


def test_the_commands_read_no_file_outside_the_clone() -> None:
    outside = [line.strip() for line in _commands().splitlines() if "../" in line]
    assert not outside, outside


def test_the_shipped_traces_are_read_by_a_command() -> None:
    named = set(SHIPPED.findall(_commands()))
    assert "benchmarks/traces/mbpp_qwen25coder.jsonl.xz" in named
    for path in named | set(SHIPPED.findall(PAGE.read_text(encoding="utf-8"))):
        path = path.rstrip(".").removesuffix("/*.xz")
        assert (ROOT / path).exists(), path

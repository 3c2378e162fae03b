"""``liftguard ... --help``: every command and subcommand prints its help and exits 0
(argparse formats each option's help with ``%``, so a bare ``%`` in one is a crash)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from adapters.cli import main
from adapters.cli._parser import build_parser


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    """The words of every command the parser knows, subcommands included."""
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(build_parser()))


def test_the_commands_include_every_subcommand() -> None:
    assert {("fit",), ("calibrate",), ("serve",), ("demo",)} <= set(COMMANDS)
    assert any(len(words) == 2 for words in COMMANDS)  # e.g. skeleton and traces subcommands


@pytest.mark.parametrize("words", COMMANDS, ids=lambda words: " ".join(words) or "liftguard")
def test_help_exits_0(words: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*words, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: ") and " ".join(("liftguard", *words)) in out

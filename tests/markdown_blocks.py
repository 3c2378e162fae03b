"""The fenced code blocks of the README and the docs pages, as the tests that run them see them.

A block opens with a line of three or more backticks or tildes (indented by at most three
spaces; a backtick fence's info string holds no backtick, so a line that starts with an
inline ```` ```python ```` span opens nothing) and closes with a line of at least as many
of the same character and nothing else (CommonMark). Its **key** is its first non-blank line,
stripped: short, readable in a registry, and stable while the block's first line is.

A block that no test runs says why on the line right before it (blank lines between are
allowed), as an HTML comment the rendered page does not show::

    <!-- not run: needs an OpenAI API key -->
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["DOCS", "ROOT", "Block", "block", "blocks", "output", "parse", "script", "script_env",
           "steps"]  # fmt: skip

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
"""The pages whose blocks are inventoried (``docs/results/`` is generated: not here)."""

_OPEN = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_MARK = re.compile(r"^\s*<!--\s*not run:(?P<reason>.*?)-->\s*$")


@dataclass(frozen=True)
class Block:
    file: str  # relative to the repository root
    line: int  # 1-based line of the opening fence
    lang: str  # the info string's first word ("" for none)
    text: str  # the lines between the fences, each ending in "\n"
    not_run: str | None  # the reason of a ``<!-- not run: ... -->`` marker ("" if empty)

    @property
    def key(self) -> str:
        return next((line.strip() for line in self.text.splitlines() if line.strip()), "")

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def parse(text: str, file: str = "<text>") -> list[Block]:
    """The fenced blocks of the markdown ``text``, in order."""
    lines = text.splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opened = _OPEN.match(lines[i])
        if opened is None or (opened["fence"][0] == "`" and "`" in opened["info"]):
            i += 1
            continue
        fence = opened["fence"]
        close = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        end = i + 1
        while end < len(lines) and not close.match(lines[end]):
            end += 1
        before = i - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        mark = _MARK.match(lines[before]) if before >= 0 else None
        body = "".join(f"{line}\n" for line in lines[i + 1 : end])
        words = opened["info"].split()
        found.append(
            Block(file, i + 1, words[0] if words else "", body,
                  None if mark is None else mark["reason"].strip())
        )  # fmt: skip
        i = end + 1
    return found


def blocks(path: Path) -> list[Block]:
    return parse(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())


def block(file: str, key: str) -> Block:
    """The block of ``file`` (relative to the root) whose key is ``key``."""
    found = [b for b in blocks(ROOT / file) if b.key == key]
    assert len(found) == 1, f"{file}: {len(found)} blocks start with {key!r}"
    return found[0]


def _split(b: Block) -> tuple[list[str], list[str]]:
    """A console block's command lines (``$ `` dropped; continuation lines kept) and its
    output lines; every line of any other block is a command line."""
    if b.lang != "console":
        return b.text.splitlines(), []
    commands, out, going = [], [], False
    for line in b.text.splitlines():
        if going or line.startswith("$ "):
            commands.append(line if going else line[2:])
            going = line.rstrip().endswith("\\")
        else:
            out.append(line)
    return commands, out


def script(b: Block, substitutions: dict[str, str] | None = None) -> str:
    """The shell script of a ``bash`` or ``console`` block, with each placeholder of
    ``substitutions`` replaced (it must be there); ``pip install`` lines are left out (the
    test environment has every extra installed)."""
    lines = [line for line in _split(b)[0] if not line.startswith("pip install ")]
    text = "\n".join(lines) + "\n"
    for old, new in (substitutions or {}).items():
        assert old in text, f"{b.where}: no {old!r} to substitute"
        text = text.replace(old, new)
    return text


def output(b: Block) -> list[str]:
    """The output lines a ``console`` block shows."""
    return _split(b)[1]


def script_env(**extra: str) -> dict[str, str]:
    """The environment a block's script runs in: this one, with the commands installed
    beside the running Python (``liftguard``, ``litellm``) first on the ``PATH``."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return {**os.environ, **extra, "PATH": path}


def steps(b: Block) -> list[tuple[str, list[str]]]:
    """A ``console`` block as ``(command, the output lines shown under it)`` pairs, each
    command's continuation lines joined to it."""
    found: list[tuple[str, list[str]]] = []
    going = False
    for line in b.text.splitlines():
        if going:
            found[-1] = (f"{found[-1][0]}\n{line}", [])
        elif line.startswith("$ "):
            found.append((line[2:], []))
        else:
            found[-1][1].append(line)
        going = line.rstrip().endswith("\\") and (line.startswith("$ ") or going)
    return found


def free_port() -> int:
    """A TCP port nothing listens on now (bound and released), for a page's server."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def stop_group(proc: subprocess.Popen[Any], sig: int, wait_s: float) -> None:
    """Send ``sig`` to ``proc``'s process group (a page's command in the background); kill
    the group if it has not ended after ``wait_s`` seconds."""
    os.killpg(proc.pid, sig)
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)

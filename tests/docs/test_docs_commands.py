"""The docs' ``liftguard`` command blocks, run as written by ``bash`` in a temporary
directory (``liftguard`` is the installed command), on the committed fixtures; only
placeholders (file names, the shared data's paths) are filled in. Text blocks that show
what the code writes (prompts, a summary, a diff) are compared with what it writes.
Registered in ``tests/docs/test_docs_blocks.py``."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from markdown_blocks import ROOT, block, script, script_env

from adapters._local._chat_template import ChatTemplate
from adapters.cli._prompt_templates import get_template
from adapters.cli._tasks import CODE_SYSTEM, MATH_SYSTEM, read_items
from guardrail import Certificate

FIXTURES = ROOT / "tests" / "fixtures"
SHARED_QWEN = ROOT.parent / "shared" / "data" / "traces" / "triviaqa_qwen25coder.jsonl"
GEMMA_NQ = FIXTURES / "traces_gemma3_nq_sample.jsonl"
GEMMA_TQ = FIXTURES / "traces_gemma3_sample.jsonl"


def sh(text: str, cwd: Path, status: int = 0) -> subprocess.CompletedProcess[str]:
    """``text`` run by ``bash -e -o pipefail`` in ``cwd``, the venv's commands first on the
    ``PATH``; its exit status must be ``status``."""
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", text], cwd=cwd, env=script_env(),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == status, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def matches(shown: list[str], printed: list[str]) -> None:
    """``printed`` is ``shown``, where ``...`` in a shown line stands for any text."""
    assert len(shown) == len(printed), (shown, printed)
    for want, got in zip(shown, printed, strict=True):
        pattern = ".*".join(re.escape(part) for part in want.split("..."))
        assert re.fullmatch(pattern, got), (want, got)


def shared_qwen(tmp_path: Path, name: str) -> None:
    if not SHARED_QWEN.exists():
        pytest.skip(f"needs the shared traces ({SHARED_QWEN})")
    shutil.copy(SHARED_QWEN, tmp_path / name)


def _trace(template: dict[str, object], trace_id: str, answer: str) -> str:
    """A trace line with the Qwen sample's tokens, unlabelled (a label reads the answer only)."""
    row = {k: v for k, v in template.items() if k != "correct"}
    return json.dumps({**row, "id": trace_id, "answer": answer, "references": []}) + "\n"


# --- docs/checking.md ----------------------------------------------------------------------------


def test_checking_label_commands(tmp_path: Path) -> None:
    template = json.loads((FIXTURES / "traces_qwen_sample.jsonl").read_text().splitlines()[0])
    mbpp = [json.loads(line) for line in (FIXTURES / "mbpp_sample.jsonl").open()]
    (tmp_path / "mbpp_traces.jsonl").write_text(
        "".join(_trace(template, row["id"], row["reference_code"]) for row in mbpp)
        + _trace(template, mbpp[0]["id"], "def remove_Occ(s, c):\n    return s")
    )
    (tmp_path / "gsm8k_traces.jsonl").write_text(
        _trace(template, "gsm8k-0", "9 * $2 = $18\nAnswer: 18")
        + _trace(template, "gsm8k-1", "Answer: 7")
    )
    code = block("docs/checking.md", "$ liftguard traces label --traces mbpp_traces.jsonl \\")
    done = sh(script(code, {
        "../shared/data/longform/mbpp_test500.jsonl": str(FIXTURES / "mbpp_sample.jsonl"),
        "../shared/data/longform/gsm8k_first600.jsonl": str(FIXTURES / "gsm8k_sample.jsonl"),
    }), tmp_path)  # fmt: skip
    err = done.stderr.splitlines()
    assert err[0] == "labelled 5 of 5 traces into labelled.jsonl by check:code (4 correct)"
    assert err[1] == "labelled 2 of 2 traces into labelled.jsonl by check:number (1 correct)"


def test_checking_prompts() -> None:
    page = "docs/checking.md"
    item = read_items(str(FIXTURES / "mbpp_sample.jsonl"), "code", None)[0]
    assert block(page, CODE_SYSTEM).text == CODE_SYSTEM + "\n"
    assert block(page, item.message.splitlines()[0]).text == item.message + "\n"
    assert block(page, MATH_SYSTEM).text == MATH_SYSTEM + "\n"
    qwen = ChatTemplate((FIXTURES / "qwen_chat_template.jinja").read_text(encoding="utf-8"))
    prompt = get_template("gguf-chat", system=CODE_SYSTEM, chat_template=qwen).prompt(item.message)
    assert block(page, "<|im_start|>system").text == prompt + "\n"  # the page shows its last "\n"


def test_checking_own_check(tmp_path: Path) -> None:
    """The contract's signature, as a module: ``--check MODULE:FUNCTION`` imports it from the
    current directory, and its ``None`` leaves the answer unlabelled."""
    contract = block("docs/checking.md", "def check(answer: str, task: dict) -> bool | None: ...")
    (tmp_path / "mycheck.py").write_text(contract.text, encoding="utf-8")
    template = json.loads((FIXTURES / "traces_qwen_sample.jsonl").read_text().splitlines()[0])
    (tmp_path / "t.jsonl").write_text(_trace(template, "mbpp-11", "def f(): pass"))
    done = sh(f"liftguard traces label --traces t.jsonl --references "
              f"{FIXTURES / 'mbpp_sample.jsonl'} --check mycheck:check --out l.jsonl",
              tmp_path, status=1)  # fmt: skip
    assert "unlabelled: check_returned_none 1" in done.stderr


# --- docs/fitting.md -----------------------------------------------------------------------------


def test_fitting_calibrate(tmp_path: Path) -> None:
    shared_qwen(tmp_path, "answers.jsonl")  # the fixtures are too small for risk 0.3
    code = "liftguard calibrate --traces answers.jsonl --risk 0.3 --delta 0.05 --out cal.json"
    done = sh(script(block("docs/fitting.md", code)), tmp_path)
    assert "target risk 0.3   delta 0.05" in done.stdout
    assert Certificate.load(tmp_path / "cal.json").calibration is not None


def test_fitting_calibrate_summary(tmp_path: Path) -> None:
    shutil.copy(GEMMA_NQ, tmp_path / "answers.jsonl")
    command = re.search(r"\(`(liftguard calibrate\n?[^`]*)` on 40", (ROOT / "docs/fitting.md")
                        .read_text(encoding="utf-8"))  # fmt: skip
    assert command is not None, "the page names the command of its summary"
    done = sh(command[1].replace("\n", " "), tmp_path)
    shown = block("docs/fitting.md", "liftguard calibrate: answers.jsonl").text.splitlines()
    matches(shown, done.stdout.splitlines())


def test_fitting_margins_from(tmp_path: Path) -> None:
    """A certificate fitted on Gemma 3's NQ-Open sample, calibrated on its TriviaQA sample
    with margins from the NQ-Open answers (the fixtures of
    ``tests/cli/test_cli_recalibrate.py``)."""
    fit = f"liftguard fit --traces {GEMMA_NQ} --out fit.json --group api --risk 0.99 --delta 0.3"
    sh(fit, tmp_path)
    shutil.copy(GEMMA_TQ, tmp_path / "labelled.jsonl")
    shutil.copy(GEMMA_NQ, tmp_path / "recorded.jsonl")
    key = "$ liftguard calibrate --certificate fit.json --traces labelled.jsonl \\"
    done = sh(script(block("docs/fitting.md", key)), tmp_path)
    assert "margins          from 40 answers of recorded.jsonl" in done.stdout
    statistic = Certificate.load(tmp_path / "cert.json").statistic
    assert statistic is not None and statistic.block_margins


# --- docs/risk-monitor.md ------------------------------------------------------------------------


def test_monitor_command(tmp_path: Path) -> None:
    shutil.copy(GEMMA_TQ, tmp_path / "LABELLED.jsonl")
    sh(f"liftguard calibrate --traces {GEMMA_NQ} --skeleton temperature --risk 0.9 --delta 0.2 "
       "--out CERT.json", tmp_path)  # fmt: skip
    synopsis = block("docs/risk-monitor.md", "liftguard monitor --traces LABELLED.jsonl "
                     "--certificate CERT.json [--alpha 0.05] [--json]")  # fmt: skip
    bare = sh(script(synopsis, {" [--alpha 0.05] [--json]": ""}), tmp_path)
    assert "coverage" in bare.stdout
    full = sh(script(synopsis, {"[--alpha 0.05] [--json]": "--alpha 0.05 --json"}), tmp_path)
    report = json.loads(full.stdout)
    assert report["alpha"] == 0.05 and "alarm" in report


# --- docs/skeleton-store.md ----------------------------------------------------------------------


def test_skeleton_store_commands(tmp_path: Path) -> None:
    shared_qwen(tmp_path, "answers.jsonl")  # the fixtures are too small for risk 0.3
    shutil.copy(ROOT / "guardrail" / "data" / "qwen_certificate.json", tmp_path / "cert.json")
    key = ("liftguard skeleton --store ./store build --name chat --traces answers.jsonl "
           "--kind uniform --risk 0.3")  # fmt: skip
    done = sh(script(block("docs/skeleton-store.md", key)), tmp_path)
    assert done.stdout.startswith("wrote chat v1 (uniform")
    assert "\n2\n" in done.stdout  # put prints the new version
    rollback = json.loads(done.stdout[done.stdout.rindex("\n{") :])
    assert (rollback["action"], rollback["version"]) == ("rollback", 1)


def test_skeleton_store_certificate_diff(tmp_path: Path) -> None:
    """The page's diff of two certificate versions is what ``diff`` prints for them: the
    shipped SmolLM2 certificate, then one recalibrated at risk 0.2 for temperature 0.7."""
    v1 = Certificate.load(ROOT / "guardrail" / "data" / "smollm2_certificate.json")
    assert v1.calibration is not None
    v2 = replace(
        v1, tau=9.93, context=replace(v1.context, temperature=0.7),
        calibration=replace(v1.calibration, tau=9.93, risk=0.2, coverage=0.25),
    )  # fmt: skip
    put = "liftguard skeleton --store ./store put chat --certificate cert.json"
    v1.save(tmp_path / "cert.json")
    sh(put, tmp_path)
    v2.save(tmp_path / "cert.json")
    sh(put, tmp_path)
    done = sh("liftguard skeleton --store ./store diff chat v1 v2", tmp_path)
    shown = block("docs/skeleton-store.md", "chat v1 -> v2: certificates").text.splitlines()
    assert done.stdout.splitlines() == shown

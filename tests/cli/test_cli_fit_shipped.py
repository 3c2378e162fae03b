"""The commands ``guardrail/data/README.md`` gives for the shipped certificates remake them
byte for byte: ``liftguard fit`` for the fitted ones (it is
:func:`guardrail.fitting.fit_certificate` behind a command line; the library alone:
``tests/guardrail/test_fit_certificate.py``), ``liftguard calibrate`` for the single-score
ones.

The TriviaQA certificates need the shared traces (skipped where they are absent); the code
certificate is made from the committed MBPP traces, so it runs everywhere."""

from __future__ import annotations

import json
import lzma
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
from reference_cpu import same_file

from adapters.cli import main

ROOT = Path(__file__).parents[2]
DATA = ROOT / "guardrail" / "data"
README = DATA / "README.md"
SHARED = ROOT.parent / "shared" / "data" / "traces"


def documented(name: str) -> list[str]:
    """The ``liftguard`` command the README gives for ``name``, as argv (no
    ``liftguard``)."""
    text = README.read_text(encoding="utf-8").replace("\\\n", " ")
    found = [line.strip() for line in text.splitlines()
             if line.strip().startswith(("liftguard fit ", "liftguard calibrate "))
             and line.rstrip().endswith(f"--out guardrail/data/{name}")]  # fmt: skip
    assert len(found) == 1, f"{README}: one 'liftguard ... --out guardrail/data/{name}'"
    return shlex.split(found[0])[1:]


FITTED = ["qwen_fitted_certificate.json", "smollm2_fitted_certificate.json"]
SINGLE_SCORE = ["qwen_certificate.json", "smollm2_certificate.json"]


@pytest.mark.parametrize("name", FITTED + SINGLE_SCORE)
def test_the_documented_command_remakes_the_shipped_certificate(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = documented(name)
    assert argv[0] == ("fit" if name in FITTED else "calibrate")
    traces = argv[argv.index("--traces") + 1]
    assert traces.startswith("../shared/data/traces/")  # run from the repository root
    if not (ROOT / traces).exists():
        pytest.skip(f"needs the shared traces ({SHARED})")
    monkeypatch.chdir(ROOT)
    out = tmp_path / name
    assert main([*argv[:-1], str(out)]) == 0
    capsys.readouterr()
    shipped = (DATA / name).read_text(encoding="utf-8")
    # the one field that may differ: the command line, which names another --out here;
    # the shipped certificate records the command the README gives
    recorded = json.loads(shipped)["provenance"]["command"]
    assert recorded == shlex.join(["liftguard", *argv])
    made = out.read_text(encoding="utf-8")
    ran = shlex.join(["liftguard", *argv[:-1], str(out)])
    assert made.count(json.dumps(ran)) == 1
    same_file(made.replace(json.dumps(ran), json.dumps(recorded)), shipped, name)


def test_the_code_certificate_is_remade_by_its_study_s_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``qwen_code_certificate.json``: ``python -m studies.qwen_code_certificate`` splits the
    committed MBPP traces (seed 7: 60 held out, 220 to fit, 220 to calibrate), runs
    ``liftguard fit --fit-fraction 1`` on the second part and ``liftguard calibrate
    --certificate`` on the third, and records the files by their names; the same here,
    byte for byte."""
    lines = lzma.decompress((ROOT / "benchmarks" / "traces" / "mbpp_qwen25coder.jsonl.xz")
                            .read_bytes()).decode("utf-8").splitlines()  # fmt: skip
    perm = np.random.default_rng(7).permutation(len(lines))
    parts = {"fit": perm[60:280], "calibrate": perm[280:]}
    paths = {}
    for part, idx in parts.items():
        paths[part] = tmp_path / f"mbpp_qwen25coder_{part}.jsonl"
        paths[part].write_text("".join(lines[i] + "\n" for i in sorted(idx)), "utf-8")
    prompt = json.loads(lines[0])["prompt"]
    start = prompt.index("<|im_start|>user\n") + len("<|im_start|>user\n")
    prefix = prompt[:start] + prompt[prompt.index("<|im_end|>", start) :]
    spec = tmp_path / "prompt_free_spec.json"
    spec.write_text(json.dumps({"kind": "prompt_free", "params": {"model": "qwen",
                                                                  "prefix": prefix}}))  # fmt: skip
    fitted, calibrated = tmp_path / "fitted.json", tmp_path / "calibrated.json"
    monkeypatch.chdir(ROOT)
    fit = ["fit", "--traces", str(paths["fit"]), "--fit-fraction", "1", "--context",
           str(DATA / "qwen_code_context.json"), "--skeleton-spec", str(spec),
           "--out", str(fitted)]  # fmt: skip
    calibrate = ["calibrate", "--certificate", str(fitted), "--traces", str(paths["calibrate"]),
                 "--risk", "0.3", "--delta", "0.05", "--out", str(calibrated)]  # fmt: skip
    assert main(fit) == 0 and main(calibrate) == 0
    capsys.readouterr()
    cert = json.loads(calibrated.read_text("utf-8"))
    for key, value in cert["provenance"].items():  # the study records paths relative
        if isinstance(value, str):
            cert["provenance"][key] = re.sub(f"{re.escape(str(tmp_path))}/|{ROOT}/", "", value)
    shipped = (DATA / "qwen_code_certificate.json").read_text(encoding="utf-8")
    same_file(json.dumps(cert, indent=2) + "\n", shipped, "qwen_code_certificate.json")

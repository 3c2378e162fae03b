"""The sandbox that runs model-written code (:func:`adapters.run_sandboxed`): hostile programs
end in bounded time, never count as passing, write nothing outside their directory and
never reach the test process; MBPP's own solutions pass and wrong programs fail.

Every hostile program below is followed by ``assert False``: had anything but a real run
of the asserts counted, it would pass. Limits are small (a few seconds), bounds on time
generous (CI machines are loaded)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from adapters import SandboxLimits, check_code, run_sandboxed
from guardrail import ConfigError

LIMITS = SandboxLimits(timeout=5, cpu_seconds=3, memory_bytes=512 << 20, processes=32)
BOUND = 60.0  # seconds any one hostile run may take, whatever the machine's load
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="only root can drop the child to nobody")


def _longform() -> Path | None:
    """The shared task files (``<repo>/../shared/data/longform``), if present."""
    env = os.environ.get("LIFTGUARD_LONGFORM_DIR")
    candidate = Path(env) if env else Path(__file__).resolve().parents[3] / "shared/data/longform"
    return candidate if (candidate / "mbpp_test500.jsonl").is_file() else None


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _run(program: str, asserts: tuple[str, ...] = ("assert False",)) -> Any:
    start = time.monotonic()
    result = run_sandboxed(program, asserts, limits=LIMITS)
    assert time.monotonic() - start < BOUND
    return result


def test_a_correct_program_passes_and_a_wrong_one_fails() -> None:
    ok = _run("def f(x):\n    return 2 * x", ("assert f(2) == 4", "assert f(0) == 0"))
    assert (ok.passed, ok.outcome, ok.detail) == (True, "passed", "")
    bad = _run("def f(x):\n    return 2 * x", ("assert f(2) == 4", "assert f(1) == 3"))
    assert (bad.passed, bad.outcome, bad.detail) == (False, "failed", "assert 1 AssertionError")
    syntax = _run("def f(:\n    pass", ("assert True",))
    assert syntax.outcome == "failed" and syntax.detail.startswith("compile SyntaxError")


def test_the_setup_runs_between_the_program_and_the_asserts() -> None:
    result = _run("def f():\n    return SETUP", ("assert f() == 3",))
    assert not result.passed
    result = run_sandboxed("def f():\n    return SETUP", ["assert f() == 3"], setup="SETUP = 3",
                           limits=LIMITS)  # fmt: skip
    assert result.passed


HOSTILE = {
    "infinite loop": "while True:\n    pass",
    "sleep forever": "import time\ntime.sleep(10_000)",
    "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
    "        pass",
    "10 GB allocation": "x = bytearray(10 * 1024**3)",
    "sys.exit(0) before the asserts": "import sys\nsys.exit(0)",
    "raise SystemExit(0)": "raise SystemExit(0)",
    "os._exit(0) before the asserts": "import os\nos._exit(0)",
    "patch AssertionError": "import builtins\nclass E(Exception):\n    pass\n"
    "builtins.AssertionError = E",
    "forge the verdict on every fd": "import os\nfor fd in range(64):\n    try:\n"
    "        os.write(fd, b'ready net=1 pidns=1 dropped=1\\npass 0 1\\n')\n"
    "    except OSError:\n        pass",
    "kill the process group": "import os\nos.killpg(os.getpgid(0), 9)",
    "trace hook that swallows lines": "import sys\nsys.settrace(lambda *a: None)",
}


@pytest.mark.parametrize("program", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_programs_never_pass(program: str) -> None:
    result = _run(program)
    assert not result.passed
    assert result.outcome in ("failed", "timeout", "no_report"), result


def _orphaned_runners() -> set[int]:
    """Sandbox processes whose parent is gone (re-parented to pid 1): leaked ones."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
            status = (entry / "status").read_text(encoding="ascii")
        except OSError:
            continue
        if b"_sandbox_runner.py" in cmdline and re.search(r"^PPid:\s+1$", status, re.M):
            found.add(int(entry.name))
    return found


@pytest.mark.parametrize(
    "program",
    ["import os, time\nos.setsid()\ntime.sleep(10_000)",
     "import ctypes, os, time\nos.setsid()\nctypes.CDLL(None).prctl(1, 0)\n"  # no PDEATHSIG
     "time.sleep(10_000)",
     "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(10_000)"],
    ids=["leave the session", "leave the session and the parent-death signal",
         "a child that leaves the session"],
)  # fmt: skip
def test_nothing_outlives_the_run(program: str) -> None:
    before = _orphaned_runners()
    assert not _run(program).passed
    deadline = time.monotonic() + 10
    while _orphaned_runners() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _orphaned_runners() - before == set()


def test_a_patched_helper_does_not_reach_the_asserts() -> None:
    # builtins and sys.modules are put back before every assert
    patched = ("import builtins, sys, types\nbuiltins.len = lambda x: 3\n"
               "fake = types.ModuleType('math')\nfake.isclose = lambda *a, **k: True\n"
               "sys.modules['math'] = fake")  # fmt: skip
    assert not _run(patched, ("assert len([]) == 3",)).passed
    assert not _run(patched, ("import math\nassert math.isclose(1, 2)",)).passed
    assert _run(patched, ("assert len([]) == 0", "import math\nassert math.pi > 3")).passed


def test_output_is_capped_and_does_not_block() -> None:
    flood = "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * (1 << 20))\n"
    result = _run(flood + "sys.stderr.write('y' * (100 << 20))", ("assert True",))
    assert result.passed
    assert result.stdout == b"x" * LIMITS.output_bytes
    assert result.stderr == b"y" * LIMITS.output_bytes


def test_the_environment_carries_no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIFTGUARD_TEST_SECRET", "hunter2")
    result = _run("import os\nprint(sorted(os.environ))\nSEEN = dict(os.environ)",
                  ("assert 'LIFTGUARD_TEST_SECRET' not in SEEN",))  # fmt: skip
    assert result.passed
    assert b"hunter2" not in result.stdout and b"LIFTGUARD_TEST_SECRET" not in result.stdout
    assert re.fullmatch(rb"\[('[A-Z]+', )*'[A-Z]+'\]\n", result.stdout), result.stdout


@needs_root
def test_nothing_is_written_outside_the_working_directory(tmp_path: Path) -> None:
    mine = tmp_path / "mine.txt"
    mine.write_text("original", encoding="utf-8")
    mine.chmod(0o666)
    target = tmp_path / "created.txt"
    scratch = Path("/tmp") / f"liftguard-test-{uuid.uuid4().hex}.txt"  # world-writable
    program = (
        "hits = []\n"
        f"for path in ({str(mine)!r}, {str(target)!r}, {str(scratch)!r}, 'mine.txt'):\n"
        "    try:\n        open(path, 'w').write('pwned')\n        hits.append(path)\n"
        "    except OSError:\n        pass\n"
    )
    result = _run(program, (f"assert hits[0] != {str(mine)!r}",))
    assert result.passed, result  # it ran, and wrote only in its own directories
    assert mine.read_text(encoding="utf-8") == "original"
    assert not target.exists()
    assert result.unprivileged
    if result.private_scratch:  # else /tmp is shared: documented
        assert not scratch.exists()
    scratch.unlink(missing_ok=True)


def test_what_a_program_writes_is_capped() -> None:
    program = ("written = 0\nfor i in range(200):\n    try:\n"
               "        with open(f'f{i}', 'wb') as fh:\n"
               "            written += fh.write(b'x' * (1 << 20))\n"
               "    except OSError:\n        break\n"
               "big = 0\ntry:\n    with open('big', 'wb') as fh:\n"
               "        for _ in range(100):\n            big += fh.write(b'x' * (1 << 20))\n"
               "except OSError:\n    pass\n")  # fmt: skip
    limits = SandboxLimits(timeout=30, file_bytes=8 << 20, scratch_bytes=32 << 20)
    result = run_sandboxed(program, ["assert big <= 8 << 20", "assert written <= 32 << 20"],
                           limits=limits)  # fmt: skip
    if result.private_scratch:
        assert result.passed, result
    else:
        assert "assert 0" not in result.detail  # RLIMIT_FSIZE holds everywhere


@needs_root
def test_killing_the_parent_does_not_reach_the_test_process() -> None:
    program = ("import os, signal\n"
               f"for pid in (os.getppid(), {os.getpid()}, 1):\n"
               "    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError:\n"
               "        pass")  # fmt: skip
    result = _run(program)
    assert not result.passed  # and this test process is still here to say so


def test_network_isolation_is_reported() -> None:
    result = _run("import socket\ntry:\n    socket.create_connection(('192.0.2.1', 80), 2)\n"
                  "    REACHED = True\nexcept OSError:\n    REACHED = False",
                  ("assert not REACHED",))  # fmt: skip
    if result.network_isolated:  # a new network namespace: no route anywhere
        assert result.passed, result


def test_a_sandbox_that_cannot_start_says_so(tmp_path: Path) -> None:
    result = run_sandboxed("pass", python=str(tmp_path / "no-python"), limits=LIMITS)
    assert (result.passed, result.outcome) == (False, "start_failed")


def test_the_working_directory_is_removed() -> None:
    result = _run("import os\nprint(os.getcwd())", ("assert True",))
    assert result.passed
    assert not Path(result.stdout.decode().strip()).exists()


@pytest.mark.parametrize("bad", [{"timeout": 0}, {"cpu_seconds": -1}, {"processes": 1.5},
                                 {"memory_bytes": True}])  # fmt: skip
def test_limits_are_validated(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=f"SandboxLimits.{next(iter(bad))}"):
        SandboxLimits(**bad)


def _wrong_program(task: dict[str, Any]) -> str:
    """A function of the right name and signature that returns None."""
    name = re.match(r"assert\s+(?:not\s+)?\(?\s*(?:set\()?(\w+)\(", task["test_list"][0])
    assert name is not None, task["test_list"][0]
    return f"def {name.group(1)}(*args, **kwargs):\n    return None\n"


def test_known_wrong_programs_fail_and_references_pass() -> None:
    for task in _rows(FIXTURES / "mbpp_sample.jsonl"):
        assert check_code(task["reference_code"], task, limits=LIMITS), task["id"]
        assert not check_code(_wrong_program(task), task, limits=LIMITS), task["id"]
        assert not check_code("pass", task, limits=LIMITS), task["id"]


def test_every_mbpp_reference_solution_passes() -> None:
    data = _longform()
    if data is None:
        pytest.skip("no shared task data (../shared/data/longform)")
    tasks = _rows(data / "mbpp_test500.jsonl")
    limits = SandboxLimits(timeout=120, cpu_seconds=60)  # task 123 takes ~9 s of CPU alone
    with ThreadPoolExecutor(4) as pool:
        passed = list(pool.map(lambda t: check_code(t["reference_code"], t, limits=limits), tasks))
    assert len(tasks) == 500
    assert [t["id"] for t, ok in zip(tasks, passed, strict=True) if not ok] == []


_AS_NOBODY = """
import os, sys
from adapters import SandboxLimits, run_sandboxed
os.setgroups([]); os.setgid(65534); os.setuid(65534)
limits = SandboxLimits(timeout=10, cpu_seconds=5)
for program, asserts in ((sys.argv[1], ["assert f(2) == 4"]), (sys.argv[2], ["assert False"])):
    r = run_sandboxed(program, asserts, limits=limits, python=sys.argv[3])
    print(r.passed, r.outcome, r.network_isolated, r.pid_namespace, r.private_scratch,
          r.unprivileged)
"""


@needs_root
def test_a_caller_without_root_gets_namespaces_of_its_own(tmp_path: Path) -> None:
    # the same checks from a caller that is not root (nobody here), through a user namespace
    system = Path("/usr/bin/python3")
    if not system.exists():
        pytest.skip("no system python3 that nobody can run")
    hostile = "import os\nos.kill(os.getppid(), 9)\nos.kill(0, 9)"
    out = subprocess.run(
        [sys.executable, "-c", _AS_NOBODY, "def f(x):\n    return 2 * x", hostile, str(system)],
        capture_output=True, text=True, timeout=BOUND, cwd="/",
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("True passed") and lines[1].startswith("False ")
    if "True True True False" not in lines[0]:
        pytest.skip(f"no user namespaces here: {lines[0]}")

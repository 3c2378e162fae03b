"""Run model-written Python in a child process, and tell whether its asserts really ran.

:func:`run_sandboxed` starts ``python -I -S -B`` on :mod:`adapters._labels._sandbox_runner` (its
docstring lists the child's steps) in a new session, in a fresh temporary directory, with
an environment of ``PATH`` and ``LANG`` only; a run passes only when the child wrote
``pass NONCE N`` on a pipe of its own, with the random nonce this run sent on its stdin
before any model code ran. Exiting early, ``sys.exit(0)``, ``os._exit(0)``, patching
``builtins`` or ``sys.modules``, printing a fake verdict, killing the parent: none of them
writes that line. What is enforced and what is not: ``docs/checking.md``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from guardrail import ConfigError

__all__ = ["SandboxLimits", "SandboxResult", "run_sandboxed"]

logger = logging.getLogger(__name__)

_RUNNER = Path(__file__).with_name("_sandbox_runner.py")
#: The unprivileged user and group a run drops to when the caller is root (``nobody``).
NOBODY = 65534
_RESULT_CAP = 4096  # bytes of the result channel kept
_GRACE = 5.0  # seconds to reap a killed child

Outcome = Literal["passed", "failed", "timeout", "no_report", "start_failed"]


@dataclass(frozen=True)
class SandboxLimits:
    """The limits of one sandboxed run (validated on construction).

    Parameters
    ----------
    timeout
        Wall-clock seconds from the start until the whole process group is killed. The
        defaults leave room for slow correct programs (MBPP's own solution of task 123
        takes about 9 s of CPU).
    cpu_seconds
        ``RLIMIT_CPU`` of each process (SIGXCPU, then SIGKILL a second later).
    memory_bytes
        ``RLIMIT_AS``: address space of each process (a larger allocation fails).
    file_bytes
        ``RLIMIT_FSIZE``: the largest file a process may write.
    processes
        ``RLIMIT_NPROC``: processes and threads of the run's user (caps a fork bomb; the
        kernel ignores it for root, hence the drop to ``nobody``).
    open_files
        ``RLIMIT_NOFILE``: open file descriptors per process.
    output_bytes
        Bytes of stdout, and of stderr, kept; the rest is read and discarded.
    scratch_bytes
        Size of each private tmpfs on ``/tmp`` (the working directory), ``/var/tmp``,
        ``/dev/shm`` and ``/run/lock``, where the platform allows mounts; it caps what the
        program can write there (a tmpfs takes memory, not disk).

    Examples
    --------
        >>> SandboxLimits(timeout=5).timeout
        5
    """

    timeout: float = 30.0
    cpu_seconds: int = 20
    memory_bytes: int = 1 << 30
    file_bytes: int = 16 << 20
    processes: int = 64
    open_files: int = 64
    output_bytes: int = 64 << 10
    scratch_bytes: int = 64 << 20

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigError(
                    f"SandboxLimits.{name}: expected a positive number, got {value!r}"
                )
            if name != "timeout" and not isinstance(value, int):
                raise ConfigError(f"SandboxLimits.{name}: expected an integer, got {value!r}")


@dataclass(frozen=True)
class SandboxResult:
    """What one sandboxed run did.

    ``passed`` is true only when every part ran to its end (the ``pass`` line with this
    run's nonce). ``outcome``: ``"passed"``; ``"failed"`` (a part raised, or did not
    compile: ``detail`` names it, e.g. ``"assert 1 AssertionError"``); ``"timeout"``;
    ``"no_report"`` (the child ended without a verdict: ``os._exit``, a signal, a limit);
    ``"start_failed"`` (the sandbox itself did not start: no model code ran, so this says
    nothing about the program). ``network_isolated``, ``pid_namespace``,
    ``unprivileged`` (switched from root to ``nobody``) and ``private_scratch`` (fresh
    tmpfs on the world-writable directories) say what the child reported it enforced
    before running the program.

    Examples
    --------
        >>> result = run_sandboxed("def f(x): return 2 * x", ["assert f(2) == 5"])
        >>> result.passed, result.outcome
        (False, 'failed')
    """

    passed: bool
    outcome: Outcome
    detail: str
    returncode: int | None
    stdout: bytes
    stderr: bytes
    elapsed: float
    network_isolated: bool
    pid_namespace: bool
    unprivileged: bool
    private_scratch: bool


def _world_readable(path: str) -> bool:
    """Every directory up to ``path`` is searchable by others, and ``path`` readable."""
    p = Path(path)
    try:
        if not p.stat().st_mode & stat.S_IROTH:
            return False
        return all(d.stat().st_mode & stat.S_IXOTH for d in p.parents)
    except OSError:
        return False


def default_python() -> str:
    """The interpreter a run uses: this one, unless the run drops to ``nobody`` and its
    standard library is out of that user's reach (e.g. a pyenv under ``/root``); then the
    system's ``python3`` if ``nobody`` can run it (a child that then finds its standard
    library unreadable fails to start, and says so)."""
    mine = os.path.realpath(sys.executable)
    if os.geteuid() != 0 or _world_readable(os.path.dirname(os.__file__)):
        return mine
    system = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if system and _world_readable(os.path.realpath(system)):
        return os.path.realpath(system)
    return mine


def _workdir() -> str:
    tmp = tempfile.mkdtemp(prefix="liftguard-sandbox-")
    if os.geteuid() == 0:
        os.chown(tmp, NOBODY, NOBODY)
    return tmp


def _remove(path: str) -> None:
    def retry(func: object, failed: str, _exc: object) -> None:
        os.chmod(os.path.dirname(failed), 0o700)
        if callable(func):
            func(failed)

    try:
        shutil.rmtree(path, onerror=retry)
    except OSError as exc:
        logger.warning("could not remove the sandbox directory %s: %s", path, exc)


def _exited(pid: int, wait: float) -> bool:
    """Whether ``pid`` ended within ``wait`` seconds, without reaping it (its pid, and so
    its process group's id, stays ours until :meth:`~subprocess.Popen.wait`)."""
    deadline = time.monotonic() + wait
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _stop(pid: int) -> None:
    """End the child ``pid`` (not yet reaped, so its pid and group id are still ours) and
    whatever it left: SIGTERM first, which the runner's outer process answers by killing
    the first process of its PID namespace (and so all of it), then SIGKILL to the
    process and its group (leftovers of a run that ended on time too)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM)
        _exited(pid, 1.0)
    for kill, target in ((os.killpg, pid), (os.kill, pid)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(target, signal.SIGKILL)


def _read(
    fds: dict[int, bytearray], caps: dict[int, int], deadline: float
) -> bool:  # fmt: skip
    """Read every fd until EOF or ``deadline``, keeping ``caps[fd]`` bytes; True if on time."""
    with selectors.DefaultSelector() as sel:
        for fd in fds:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                buf = fds[key.fd]
                buf += chunk[: max(0, caps[key.fd] - len(buf))]
    return True


def _verdict(
    lines: list[bytes], nonce: bytes, n_asserts: int, on_time: bool, returncode: int | None
) -> tuple[bool, Outcome, str]:
    first = lines[0] if lines else b""
    if not first.startswith(b"ready "):
        why = first.decode(errors="replace") or "the child ended before it was ready"
        return False, "start_failed", why
    if b"pass " + nonce + b" %d" % n_asserts in lines[1:]:
        return True, "passed", ""
    if not on_time:
        return False, "timeout", "killed at the wall-clock timeout"
    fails = [line for line in lines[1:] if line.startswith(b"fail ")]
    if fails:
        return False, "failed", fails[0][5:].decode(errors="replace")
    why = f"the child ended without a verdict (exit status {returncode}; 128 + N: signal N)"
    return False, "no_report", why


def run_sandboxed(
    program: str,
    asserts: Sequence[str] = (),
    *,
    setup: str = "",
    limits: SandboxLimits | None = None,
    python: str | None = None,
) -> SandboxResult:
    """Run ``program``, then ``setup``, then each of ``asserts`` in a sandboxed child.

    All three run in one namespace (named ``answer``, so an ``if __name__ ==
    "__main__":`` block of the program does not run), each part compiled before any
    runs. The run passes when every part returned normally.

    Parameters
    ----------
    program
        Untrusted code (e.g. a model's answer).
    asserts
        Statements run after it, one by one (e.g. MBPP's ``test_list``).
    setup
        Code run between the program and the asserts (MBPP's ``test_setup_code``).
    limits
        :class:`SandboxLimits`; the defaults if None.
    python
        The interpreter; :func:`default_python` if None.

    Returns
    -------
    SandboxResult
        Never raises for what the program does; a sandbox that could not start is
        ``outcome="start_failed"``.

    Examples
    --------
    >>> run_sandboxed("def f(x): return 2 * x", ["assert f(2) == 4"]).passed
    True
    >>> run_sandboxed("import sys; sys.exit(0)", ["assert False"]).outcome
    'failed'
    """
    limits = limits or SandboxLimits()
    nonce = secrets.token_hex(16).encode()
    tmp = _workdir()
    read_fd, write_fd = os.pipe()
    start = time.monotonic()
    try:
        job = {"program": program, "setup": setup, "asserts": list(asserts),
               "uid": NOBODY, "gid": NOBODY, **vars(limits)}  # fmt: skip
        job_path = os.path.join(tmp, ".job.json")
        with open(os.open(job_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as fh:
            json.dump(job, fh)
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": tmp, "TMPDIR": tmp}
        try:
            command = [python or default_python(), "-I", "-S", "-B", str(_RUNNER)]
            proc = subprocess.Popen(
                [*command, str(write_fd), job_path],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(write_fd,),
                cwd=tmp,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            why = f"{type(exc).__name__}: {exc}"
            elapsed = time.monotonic() - start
            return SandboxResult(False, "start_failed", why, None, b"", b"", elapsed,
                                 False, False, False, False)  # fmt: skip
        finally:
            os.close(write_fd)
        return _finish(proc, read_fd, nonce, len(asserts), limits, start)
    finally:
        os.close(read_fd)
        _remove(tmp)


def _finish(
    proc: subprocess.Popen[bytes], read_fd: int, nonce: bytes, n_asserts: int,
    limits: SandboxLimits, start: float,
) -> SandboxResult:  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    on_time = False
    out, err, result = bytearray(), bytearray(), bytearray()
    try:
        with contextlib.suppress(BrokenPipeError):  # a child that died at once: start_failed
            proc.stdin.write(nonce + b"\n")
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
        bufs = {proc.stdout.fileno(): out, proc.stderr.fileno(): err, read_fd: result}
        caps = {proc.stdout.fileno(): limits.output_bytes,
                proc.stderr.fileno(): limits.output_bytes, read_fd: _RESULT_CAP}  # fmt: skip
        on_time = _read(bufs, caps, start + limits.timeout)
    finally:
        if on_time:
            _exited(proc.pid, 1.0)  # its own exit status, if it is on its way out
        _stop(proc.pid)
        try:
            returncode: int | None = proc.wait(timeout=_GRACE)
        except subprocess.TimeoutExpired:
            logger.warning("sandbox process %d did not end after SIGKILL", proc.pid)
            returncode = None
        proc.stdout.close()
        proc.stderr.close()
    lines = bytes(result).splitlines()
    passed, outcome, detail = _verdict(lines, nonce, n_asserts, on_time, returncode)
    if outcome == "start_failed" and err.strip():  # only our own code ran: its last words
        detail += ": " + bytes(err).strip().splitlines()[-1].decode(errors="replace")
    ready = lines[0].decode(errors="replace") if lines else ""
    return SandboxResult(
        passed=passed,
        outcome=outcome,
        detail=detail,
        returncode=returncode,
        stdout=bytes(out),
        stderr=bytes(err),
        elapsed=time.monotonic() - start,
        network_isolated="net=1" in ready.split(),
        pid_namespace="pidns=1" in ready.split(),
        unprivileged="dropped=1" in ready.split(),
        private_scratch="scratch=1" in ready.split(),
    )

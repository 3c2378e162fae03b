"""The child side of :mod:`adapters._labels._sandbox`: run as a script, never imported by
the library.

Started as ``python -I -S -B _sandbox_runner.py RESULT_FD JOB_PATH`` by
:func:`adapters.run_sandboxed`, in a new session, in the run's temporary directory,
with a minimal environment. In order, before any model-written code runs:

1. read the job (the program, the setup, the asserts, the limits; a root-only file when
   the parent runs as root) and delete it; read the run's nonce from stdin, then put
   ``/dev/null`` on stdin;
2. try to leave the network (a new network namespace: only a loopback interface, down),
   the process tree (a new PID namespace, whose first process is forked off to run the
   job: when it ends, the kernel kills every process it left, and it mounts a ``/proc``
   of its own) and the file system's scratch space (a new mount namespace with a fresh,
   size-capped tmpfs on ``/tmp``, ``/var/tmp``, ``/dev/shm`` and ``/run/lock``, the
   working directory inside the new ``/tmp``);
3. set the resource limits, drop to the unprivileged uid/gid when running as root, and
   ask for SIGKILL if the parent dies;
4. write the ``ready`` line (what was enforced) on the result channel, compile every part,
   then run the program, the setup and each assert in one namespace, restoring the
   builtins and ``sys.modules`` as they were before the program (and
   clearing trace and profile hooks) before the setup and before every assert (modules
   the program imported are dropped from ``sys.modules``: an import there re-imports);
5. only when every part returned normally, write ``pass NONCE N`` (N asserts) on the
   result channel, then leave at once (``os._exit``: no atexit handler, no thread joins).

Everything the last two steps call after the program started is held in locals taken
before it started, so rebinding names in ``builtins``, ``os`` or this module does not
reach them. What this does not defend is in ``docs/checking.md``.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import resource
import signal
import sys
import time
from typing import Any, NoReturn

CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 0x4000, 1 << 18
PR_SET_PDEATHSIG = 1
#: The world-writable directories: a private, size-capped tmpfs each where mounts work.
SCRATCH = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
_LIMITS = (
    ("RLIMIT_CPU", "cpu_seconds"),
    ("RLIMIT_AS", "memory_bytes"),
    ("RLIMIT_FSIZE", "file_bytes"),
    ("RLIMIT_NPROC", "processes"),
    ("RLIMIT_NOFILE", "open_files"),
)


def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _unshare(flags: int) -> bool:
    """Enter new namespaces ``flags``; False where the platform or our rights refuse."""
    try:
        return bool(_libc().unshare(flags) == 0)
    except (OSError, AttributeError):
        return False


def _map_ids(uid: int, gid: int) -> None:
    """In a new user namespace: be the same uid and gid there as outside (unmapped ids
    cannot create files)."""
    for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                       ("/proc/self/gid_map", f"{gid} {gid} 1")):  # fmt: skip
        with contextlib.suppress(OSError), open(path, "w", encoding="ascii") as fh:
            fh.write(text)


def _mount(source: str, target: str, kind: str | None, flags: int, data: str | None) -> bool:
    try:
        return bool(_libc().mount(source.encode(), target.encode(),
                                  kind and kind.encode(), flags,
                                  data and data.encode()) == 0)  # fmt: skip
    except (OSError, AttributeError):
        return False


def _private_scratch(size: int, workdir: str) -> str | None:
    """A mount namespace of our own, with a fresh tmpfs of ``size`` bytes on every
    :data:`SCRATCH` directory; the new working directory (``workdir``'s name under the
    new ``/tmp``), or None where mounts are refused."""
    if not _unshare(CLONE_NEWNS) or not _mount("none", "/", None, MS_REC | MS_PRIVATE, None):
        return None
    for target in SCRATCH:
        options = f"size={size},mode=1777"
        if os.path.isdir(target) and not _mount("tmpfs", target, "tmpfs",
                                                 MS_NOSUID | MS_NODEV, options):  # fmt: skip
            return None
    work = os.path.join("/tmp", os.path.basename(workdir))
    try:
        os.mkdir(work, 0o700)
    except OSError:
        return None
    return work


def _set_limits(job: dict[str, Any]) -> None:
    for name, key in _LIMITS:
        which = getattr(resource, name)
        _soft, hard = resource.getrlimit(which)
        value = int(job[key])
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        # CPU: SIGXCPU at the limit, SIGKILL a second later
        top = value + 1 if name == "RLIMIT_CPU" and hard == resource.RLIM_INFINITY else value
        resource.setrlimit(which, (value, top))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write fails (EFBIG), always


def _drop_privileges(uid: int, gid: int, root: bool) -> bool:
    """Switch to ``uid``/``gid`` with no supplementary groups if we started as root."""
    if not root:
        return False
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    if os.geteuid() == 0 or os.getuid() == 0:  # pragma: no cover - setuid cannot fail open
        raise SystemExit("could not drop root")
    return True


def _wait(pid: int, timeout: float) -> int:
    """The PID namespace's first process' exit status; SIGKILL it after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        time.sleep(0.01)


def _run(job: dict[str, Any], nonce: bytes, fd: int, ready: bytes) -> NoReturn:
    """Steps 4 and 5 of the module docstring; never returns."""
    write, exit_, exec_, length = os.write, os._exit, builtins.exec, len
    flushes = (sys.stdout.flush, sys.stderr.flush)

    def leave(status: int) -> NoReturn:  # after the verdict: what the program printed, then out
        for flush in flushes:
            with contextlib.suppress(BaseException):
                flush()
        exit_(status)

    settrace, setprofile = sys.settrace, sys.setprofile
    builtins_dict, modules = vars(builtins), sys.modules
    saved_builtins, saved_modules = dict(builtins_dict), dict(modules)
    clear, update, update_modules = builtins_dict.clear, builtins_dict.update, modules.update
    asserts: list[str] = job["asserts"]
    parts = [("answer", job["program"]), ("setup", job["setup"])]
    parts += [(f"assert {i}", a) for i, a in enumerate(asserts)]
    write(fd, ready)
    try:
        codes = [compile(src, f"<{name}>", "exec", 0, True, 0) for name, src in parts]
    except BaseException as exc:  # a syntax error in the answer (the rest is the task's)
        write(fd, f"fail compile {type(exc).__name__}: {exc}\n".encode()[:1000])
        leave(1)
    namespace: dict[str, Any] = {"__name__": "answer", "__builtins__": builtins}
    done = 0
    for (name, _), code in zip(parts, codes, strict=True):
        if done:
            settrace(None)
            setprofile(None)
            clear()
            update(saved_builtins)
            for module in [module for module in modules if module not in saved_modules]:
                del modules[module]
            update_modules(saved_modules)
        try:
            exec_(code, namespace)
        except BaseException as exc:  # SystemExit too: leaving early is failing
            write(fd, f"fail {name} {type(exc).__name__}\n".encode()[:1000])
            leave(1)
        done += 1
    if done == length(parts):
        write(fd, b"pass " + nonce + b" %d\n" % length(asserts))
    leave(0)


def main() -> None:
    fd, job_path = int(sys.argv[1]), sys.argv[2]
    with open(job_path, encoding="utf-8") as fh:
        job: dict[str, Any] = json.load(fh)
    os.unlink(job_path)
    nonce = os.read(0, 256).strip()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    root, uid, gid = os.geteuid() == 0, os.getuid(), os.getgid()
    # not root: a user namespace of our own gives the rights to make the others
    network = _unshare(CLONE_NEWNET | (0 if root else CLONE_NEWUSER))
    if network and not root:
        _map_ids(uid, gid)
    pidns = _unshare(CLONE_NEWPID)
    work = _private_scratch(int(job["scratch_bytes"]), os.getcwd())
    if work is not None:
        if root:
            os.chown(work, int(job["uid"]), int(job["gid"]))
        os.chdir(work)
        os.environ.update(HOME=work, TMPDIR=work)
    pid = os.fork() if pidns else 0
    if pid:  # the parent, outside the new PID namespace: runs nothing of the job
        # the library's SIGTERM: kill the child by its pid, which it cannot leave (unlike
        # the process group) and whose death takes its whole PID namespace with it
        signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGKILL))
        for own in (0, 1, 2, fd):
            os.close(own)
        code = _wait(pid, float(job["timeout"]) + 1.0)  # a backstop: the library kills first
        os._exit(code if code >= 0 else 128 - code)
    # the first process of the new PID namespace: a /proc that shows only its processes
    private_proc = bool(pidns and work and _mount("proc", "/proc", "proc",
                                                  MS_NOSUID | MS_NODEV | MS_NOEXEC, None))
    _set_limits(job)
    dropped = _drop_privileges(int(job["uid"]), int(job["gid"]), root)
    if dropped and not os.access(os.path.dirname(os.__file__), os.R_OK | os.X_OK):
        os.write(fd, b"startfail the interpreter's standard library is not readable\n")
        os._exit(3)
    with contextlib.suppress(OSError, AttributeError):
        _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    ready = (f"ready net={int(network)} pidns={int(pidns)} dropped={int(dropped)} "
             f"scratch={int(work is not None)} proc={int(private_proc)}\n").encode()
    _run(job, nonce, fd, ready)


if __name__ == "__main__":
    main()

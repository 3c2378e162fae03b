"""``--record DIR`` when the disk fails, and who may read what it writes.

A full disk is simulated at the process boundary: ``os.write`` on the files of the record
directory behaves as ``write(2)`` on a disk with ``free`` bytes left (a write that does not
fit writes what fits and returns the short count, the next fails with ``ENOSPC``); every
other descriptor is written for real. A second test lets the kernel itself refuse the
writes (``RLIMIT_FSIZE`` in a child process). The files are then read back as they are on
disk, and by ``liftguard traces label``.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import proxy_harness  # noqa: F401 (puts the adapters' test servers on the path)
import pytest
from sse_server import token_entry

from adapters._proxy._recording import AnswerRecord, Recorder, record_line
from adapters._serving._metrics import ProxyMetrics
from adapters.cli import main

ROOT = Path(__file__).resolve().parents[2]
_real_write = os.write


class FullDisk:
    """``os.write`` for the files under ``directory`` as on a disk with ``free`` bytes left
    (``None``: room enough); other descriptors are written for real."""

    def __init__(self, directory: Path, free: int | None) -> None:
        self.directory = directory
        self.free = free
        self.refused = 0

    def _ours(self, fd: int) -> bool:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not self.directory.is_dir():
            return False
        return any(os.path.samestat(st, p.stat()) for p in self.directory.iterdir())

    def __call__(self, fd: int, data: Any) -> int:
        if self.free is None or not self._ours(fd):
            return _real_write(fd, data)
        if self.free == 0:
            self.refused += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written = _real_write(fd, bytes(data)[: self.free])
        self.free -= written
        return written


def _record(i: int, question: str = "What is the capital of France?") -> AnswerRecord:
    return AnswerRecord(
        request_id=f"r{i:04d}", model_id="test-model", vocab_size=50_000, top_k=5,
        messages=[{"role": "user", "content": question}], settings={"model": "test-model"},
        text=["Paris"], entries=[token_entry("Paris", -0.05)], finish_reason="stop",
        complete=True, verdict={"state": "certified"}, created=1_700_000_000.0,
    )  # fmt: skip


LINE = len(record_line(_record(0), "proxy").encode()) + 1  # every _record(i) line is this long


def _ids(path: Path) -> list[str]:
    """The ids of a file that holds whole lines only (each ends with a newline)."""
    data = path.read_bytes()
    assert data.endswith(b"\n") or not data, f"{path.name} ends with a torn line"
    return [json.loads(line)["id"] for line in data.decode().splitlines()]


@pytest.fixture
def recorder(tmp_path: Path) -> Iterator[Recorder]:
    rec = Recorder(tmp_path / "rec", metrics=ProxyMetrics())
    rec.start()
    yield rec
    rec.close()


def _record_all(recorder: Recorder, numbers: range) -> None:
    for i in numbers:
        assert recorder.submit(_record(i))
    assert recorder.flush(30)


def _disk_drops(recorder: Recorder) -> float:
    value: float = recorder._metrics.records_dropped.labels(reason="disk")._value.get()
    return value


def test_a_full_disk_keeps_whole_lines_in_one_file(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = recorder.directory
    disk = FullDisk(directory, free=2 * LINE + LINE // 2)  # the third line fits by half
    monkeypatch.setattr(os, "write", disk)
    _record_all(recorder, range(150))
    (path,) = directory.iterdir()  # one file, not one more per dropped line
    assert _ids(path) == ["r0000", "r0001"]  # the half-written third line was cut back off
    assert path.stat().st_size == 2 * LINE
    assert disk.refused >= 148  # every later line was really refused by the disk
    assert (recorder.written, recorder.dropped, _disk_drops(recorder)) == (2, 148, 148)
    disk.free = None  # room again: the same file goes on
    _record_all(recorder, range(150, 152))
    assert [p.name for p in directory.iterdir()] == [path.name]
    assert _ids(path) == ["r0000", "r0001", "r0150", "r0151"]
    assert (recorder.written, recorder.dropped) == (4, 148)


def test_files_rotate_on_size_only_when_the_disk_is_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder(tmp_path / "rec", metrics=ProxyMetrics(), max_bytes=2 * LINE + 10)
    recorder.start()
    disk = FullDisk(recorder.directory, free=5 * LINE + LINE // 2)  # 5 lines, then half
    monkeypatch.setattr(os, "write", disk)
    try:
        _record_all(recorder, range(50))
        files = sorted(recorder.directory.iterdir())
        assert [_ids(p) for p in files] == [["r0000", "r0001"], ["r0002", "r0003"], ["r0004"]]
        assert (recorder.written, recorder.dropped) == (5, 45)
        disk.free = None
        _record_all(recorder, range(50, 53))
    finally:
        recorder.close()
    files = sorted(recorder.directory.iterdir())
    assert [_ids(p) for p in files[2:]] == [["r0004", "r0050"], ["r0051", "r0052"]]


def test_a_tail_that_could_not_be_cut_at_once_is_cut_before_the_next_line(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = FullDisk(recorder.directory, free=LINE + LINE // 2)
    monkeypatch.setattr(os, "write", disk)
    real_truncate, failures = os.ftruncate, [OSError(errno.EIO, "I/O error")]

    def ftruncate(fd: int, length: int) -> None:
        if failures:
            raise failures.pop()
        real_truncate(fd, length)

    monkeypatch.setattr(os, "ftruncate", ftruncate)
    _record_all(recorder, range(2))
    (path,) = recorder.directory.iterdir()
    assert path.stat().st_size == LINE + LINE // 2  # the cut failed: half a line is left
    disk.free = None
    _record_all(recorder, range(2, 3))
    assert _ids(path) == ["r0000", "r0002"]


_CHILD = textwrap.dedent(
    """
    import json, resource, signal, sys
    from adapters._serving._metrics import ProxyMetrics
    from adapters._proxy._recording import AnswerRecord, Recorder

    directory, limit = sys.argv[1], int(sys.argv[2])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    recorder = Recorder(directory, metrics=ProxyMetrics(), max_bytes=10 * limit)
    recorder.start()
    for i in range(20):
        recorder.submit(AnswerRecord(
            request_id=f"r{i:04d}", model_id="m", vocab_size=10, top_k=0, messages=[],
            settings={}, text=["x" * 100], entries=[], finish_reason="stop", complete=True,
            verdict={}, created=1_700_000_000.0,
        ))
    recorder.flush(30)
    recorder.close()
    print(json.dumps([recorder.written, recorder.dropped]))
    """
)


def test_a_write_the_kernel_refuses_leaves_no_torn_line(tmp_path: Path) -> None:
    directory = tmp_path / "rec"
    one = AnswerRecord(
        request_id="r0000", model_id="m", vocab_size=10, top_k=0, messages=[], settings={},
        text=["x" * 100], entries=[], finish_reason="stop", complete=True, verdict={},
        created=1_700_000_000.0,
    )  # fmt: skip
    line = len(record_line(one, "proxy").encode()) + 1
    limit = 3 * line + line // 2  # the largest file size this process may write
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(directory), str(limit)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [3, 17]
    (path,) = directory.iterdir()
    assert _ids(path) == ["r0000", "r0001", "r0002"]


def test_recorded_files_are_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)  # the most permissive umask: only the recorder's own modes count
    try:
        recorder = Recorder(tmp_path / "a" / "b", metrics=ProxyMetrics(), max_bytes=LINE)
        recorder.start()
        _record_all(recorder, range(2))  # one line per file: two files
        recorder.close()
    finally:
        os.umask(old)
    mode = lambda p: stat.S_IMODE(os.stat(p).st_mode)  # noqa: E731
    assert mode(tmp_path / "a") == mode(tmp_path / "a" / "b") == 0o700
    files = sorted((tmp_path / "a" / "b").iterdir())
    assert len(files) == 2 and [mode(p) for p in files] == [0o600, 0o600]


# --- reading what was recorded -------------------------------------------------------------


def _label(tmp_path: Path, *traces: Path) -> int:
    refs = tmp_path / "refs.jsonl"
    refs.write_text(
        json.dumps({"question": "What is the capital of France?", "answer": "Paris"}) + "\n"
        + json.dumps({"question": "Où est la tour Eiffel ?", "answer": "Paris"}) + "\n",
        encoding="utf-8",
    )  # fmt: skip
    argv = ["traces", "label", "--traces", *map(str, traces), "--references", str(refs)]
    return main([*argv, "--out", str(tmp_path / "labelled.jsonl")])


def _lines(*records: AnswerRecord) -> bytes:
    return b"".join(record_line(r, "proxy").encode() + b"\n" for r in records)


def test_label_skips_and_counts_a_torn_last_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torn = _lines(_record(2, "Où est la tour Eiffel ?"))
    cut = torn.index("Où".encode()) + 2  # inside the two bytes of "ù": not even UTF-8
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_bytes(_lines(_record(0), _record(1)) + torn[:cut])
    second.write_bytes(_lines(_record(3, "Où est la tour Eiffel ?")) + torn[: len(torn) // 2])
    assert _label(tmp_path, first, second) == 0
    labelled = (tmp_path / "labelled.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["id"] for line in labelled] == ["r0000", "r0001", "r0003"]
    err = capsys.readouterr().err
    assert f"warning: {first}:3: skipped 1 torn last line" in err
    assert f"warning: {second}:2: skipped 1 torn last line" in err
    assert "labelled 3 of 3 traces" in err and "skipped: torn last line 2" in err


def test_label_still_rejects_a_corrupt_line_inside_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torn = _lines(_record(1))[:100]
    inside = tmp_path / "inside.jsonl"
    inside.write_bytes(_lines(_record(0)) + torn + b"\n" + _lines(_record(2)))
    assert _label(tmp_path, inside) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{inside}:2: invalid JSON" in err[0]
    ended = tmp_path / "ended.jsonl"  # a last line that ends with its newline is not torn
    ended.write_bytes(_lines(_record(0)) + torn + b"\n")
    assert _label(tmp_path, ended) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{ended}:2: invalid JSON" in err[0]
    latin = tmp_path / "latin.jsonl"  # bytes that are not UTF-8 inside a file
    latin.write_bytes(_lines(_record(0)) + "é\n".encode("latin-1") + _lines(_record(2)))
    assert _label(tmp_path, latin) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{latin}:2: invalid UTF-8" in err[0]

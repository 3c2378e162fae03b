"""Load latency of a stored skeleton (``python -m benchmarks.bench_store_load``).

Writes one version per (vocabulary size, dtype) -- a ``probs`` vector of 50k
or 262,144 entries, float32 or float64, plus a small calibration in the
manifest -- to a local store in a temporary directory, then times
``SkeletonStore.get`` (read the manifest, check its sha256, read the
safetensors file, check the sha256 of every array and of the file) and its
parts, best of N with ``time.perf_counter``. Also timed: ``resolve`` of an
alias (what ``SkeletonHandle.refresh()`` costs when nothing changed) and
``put``. Files are in the page cache after the first read, so this is the
warm-cache latency; a cold read adds the disk's time for 0.2-2 MB.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load as st_load

from skeleton_store import SkeletonStore

SIZES = (50_000, 262_144)
DTYPES = ("float32", "float64")


def _best_ms(fn: Callable[[], Any], repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


_CAL = {"method": "ltt", "tau": 2.0, "risk": 0.1, "delta": 0.1, "score": "lift", "n": 1000,
        "n_answered": 600, "n_errors": 30, "coverage": 0.6, "empirical_risk": 0.05,
        "risk_upper": 0.07}  # fmt: skip


def _measure(store: SkeletonStore, root: str, p: np.ndarray, repeat: int) -> tuple[float, ...]:
    """(file MB, get, resolve, read file, safetensors load, sha256, put) in ms."""
    name = f"bench-{p.size}-{p.dtype}"

    def put() -> None:
        store.put(name, {"probs": p}, kind="vsd", vocab_size=p.size, calibration=_CAL)

    put_ms = _best_ms(put, max(3, repeat // 10))
    store.set_alias(name, "production", 1)
    blob_path = Path(root, name, store.show(name, 1)["blob"]["path"])
    data = blob_path.read_bytes()
    return (
        len(data) / 1e6,
        _best_ms(lambda: store.get(name, "production"), repeat),
        _best_ms(lambda: store.resolve(name, "production"), repeat),
        _best_ms(blob_path.read_bytes, repeat),
        _best_ms(lambda: st_load(data), repeat),
        _best_ms(lambda: hashlib.sha256(data).hexdigest(), repeat),
        put_ms,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--dir", default=None, help="where to make the temp store (default: $TMPDIR)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        store = SkeletonStore(root)
        for size in SIZES:
            for dtype in DTYPES:
                p = rng.dirichlet(np.ones(size)).astype(dtype)
                rows.append((size, dtype, *_measure(store, root, p, args.repeat)))
    print(
        f"Python {platform.python_version()} on {platform.machine()}, local store, "
        f"best of {args.repeat} (put: best of {max(3, args.repeat // 10)}), warm page cache\n"
    )
    print(
        "| vocab | dtype | file MB | `get` ms (verified) | `resolve` alias ms | read file ms "
        "| safetensors load ms | sha256 of file ms | `put` ms |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for size, dtype, mb, get_ms, res_ms, read_ms, load_ms, sha_ms, put_ms in rows:
        print(
            f"| {size} | {dtype} | {mb:.2f} | {get_ms:.2f} | {res_ms:.3f} | {read_ms:.2f} "
            f"| {load_ms:.2f} | {sha_ms:.2f} | {put_ms:.2f} |"
        )


if __name__ == "__main__":
    main()

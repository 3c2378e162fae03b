"""Transfer across datasets: fit a certificate on one dataset's labelled traces and
evaluate it (tau recalibrated on each split, like every baseline) on the other, both
directions, for every model of ``models.py``.

    python -m studies.transfer.run SHARED_TRACES_DIR NQ_TRACES_DIR
        [--results DIR] [--models KEY,...] [--bootstrap N]

SHARED_TRACES_DIR holds each model's TriviaQA traces, NQ_TRACES_DIR its NQ-Open traces
(file names in ``models.py``), made with
``liftguard traces generate --model M --questions nq_open_efficientqa_dev.jsonl
--dataset nq_open --out NQ_TRACES_DIR/nq_open_M.jsonl``.
Writes the certificates and eval JSON into ``--results`` (default
``studies/transfer/results``), which ``table.py`` and ``summary.py`` read.

Each statistic is fitted on all of its dataset's answers (``--fit-fraction 1``): eval
recalibrates tau on every split of the other dataset, so a calibration half at fit
time would only take answers away from the fit.

The shipped feature presets were chosen on TriviaQA, so NQ-Open -> TriviaQA is also run
with features chosen on NQ-Open alone (``select_features.py`` on every model's NQ-Open
traces): ``*_nq2tq_clean_*``. Each direction also gets its in-domain reference
(``*_ceiling.json``): the certificate's features fitted and scored out of fold on the
test set itself, what no statistic over them fitted elsewhere is expected to beat.
The evaluations at each model's ``intervals`` risks add 95% paired bootstrap
intervals (``--bootstrap``, default 200 resamples). NQ-Open -> TriviaQA is also
evaluated with ``--top-k 5`` (``*_k5``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from studies.transfer.models import select
from studies.transfer.select_features import FOLDS, REPEATS, cross_validate

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

EVAL = ("--delta", "0.05", "--splits", "50", "--seed", "7", "--json")


def liftguard(*args: str, out: Path | None = None) -> None:
    """Run ``liftguard ARGS``, its stdout into ``out`` (discarded without one)."""
    with open(out if out else "/dev/null", "w", encoding="utf-8") as stdout:
        if subprocess.run(["liftguard", *args], stdout=stdout).returncode:
            raise SystemExit(f"run.py: failed: liftguard {' '.join(args)}")


def _ceiling(cert: str, test: str, out: Path) -> None:
    """The in-domain reference of ``cert``'s features on ``test``: their logistic statistic
    fitted and scored out of fold on the test set itself (``select_features.py --cv``).
    It looks at the test set, so it is a ceiling to read the certificate against, not a
    result."""
    names = json.loads(Path(cert).read_text(encoding="utf-8"))["statistic"]["features"]
    mean, sd = cross_validate(names, test)
    data = {"features": names, "auroc_mean": mean, "auroc_sd": sd, "folds": FOLDS,
            "repeats": REPEATS, "test": Path(test).name}  # fmt: skip
    out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tq_dir", type=Path, help="the shared TriviaQA traces")
    parser.add_argument("nq_dir", type=Path, help="the NQ-Open traces")
    parser.add_argument("--results", type=Path, default=HERE / "results")
    parser.add_argument("--models", help="comma-separated keys of models.py (default: all)")
    parser.add_argument("--bootstrap", default="200", help="resamples of the intervals")
    args = parser.parse_args(argv)
    models = select(args.models)
    missing = [str(p) for m in models
               for p in (args.tq_dir / m.triviaqa, args.nq_dir / m.nq_open, ROOT / m.context)
               if not p.is_file()]  # fmt: skip
    if missing:
        print("run.py: missing input file(s): " + ", ".join(missing), file=sys.stderr)
        return 2
    out = args.results
    out.mkdir(parents=True, exist_ok=True)

    start = time.monotonic()
    selected = out / "nq_selected_features.txt"
    with selected.open("w", encoding="utf-8") as f:
        subprocess.run([sys.executable, str(HERE / "select_features.py"),
                        *(str(args.nq_dir / m.nq_open) for m in models)],
                       stdout=f, check=True)  # fmt: skip
    nq_features = selected.read_text(encoding="utf-8").strip().splitlines()[-1]
    print(f"select_features.py: {time.monotonic() - start:.0f}s", file=sys.stderr)

    for m in models:
        start = time.monotonic()
        tq, nq, ctx = str(args.tq_dir / m.triviaqa), str(args.nq_dir / m.nq_open), ROOT / m.context
        cert = {name: str(out / f"{m.key}_{name}.json") for name in ("tq", "nq", "nq_clean")}
        fit = ("fit", "--context", str(ctx), "--fit-fraction", "1")
        liftguard(*fit, "--traces", tq, "--out", cert["tq"])
        liftguard(*fit, "--traces", nq, "--out", cert["nq"])
        liftguard(*fit, "--traces", nq, "--features", nq_features, "--out", cert["nq_clean"])
        for r in m.risks["nq2tq"]:
            boot = ("--bootstrap", args.bootstrap) if r in m.intervals["nq2tq"] else ()
            for topk in ((), ("--top-k", "5")):
                k = "_k5" if topk else ""
                liftguard("eval", "--traces", tq, "--certificate", cert["nq"], "--risk", r,
                           *EVAL, *topk, *(() if topk else boot),
                           out=out / f"{m.key}_nq2tq_r{r}{k}.json")  # fmt: skip
                liftguard("eval", "--traces", tq, "--certificate", cert["nq_clean"],
                           "--risk", r, *EVAL, *topk,
                           out=out / f"{m.key}_nq2tq_clean_r{r}{k}.json")  # fmt: skip
        for r in m.risks["tq2nq"]:
            boot = ("--bootstrap", args.bootstrap) if r in m.intervals["tq2nq"] else ()
            liftguard("eval", "--traces", nq, "--certificate", cert["tq"], "--risk", r,
                       *EVAL, *boot, out=out / f"{m.key}_tq2nq_r{r}.json")  # fmt: skip
        _ceiling(cert["nq"], tq, out / f"{m.key}_nq2tq_ceiling.json")
        _ceiling(cert["tq"], nq, out / f"{m.key}_tq2nq_ceiling.json")
        print(f"{m.key}: {time.monotonic() - start:.0f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``liftguard eval --plot DIR``: risk-coverage curves, score distributions and
tokens read, as PNG files and a Markdown report that embeds them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["write_plots"]


def _risk_coverage(score: npt.NDArray[np.float64], correct: npt.NDArray[np.bool_]) -> Any:
    finite = np.isfinite(score)
    order = np.argsort(-score[finite], kind="stable")
    err = ~correct[finite][order]
    n = np.arange(1, err.size + 1)
    return n / score.size, np.cumsum(err) / n


def write_plots(
    out_dir: str | Path,
    methods: list[Any],
    correct: npt.NDArray[np.bool_],
    results: dict[str, dict[str, Any]],
    *,
    title: str,
    risk: float,
) -> Path:
    """Write the figures and ``report.md`` into ``out_dir``; return the report path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for m in reversed(methods):  # the certificate (first) is drawn last, on top
        cov, rsk = _risk_coverage(m.decision, correct)
        first = m is methods[0]
        ax.plot(
            cov,
            rsk,
            label=f"{m.name} (AUROC {results[m.name]['auroc']:.3f})",
            lw=2.4 if first else 1.4,
            ls="--" if first else "-",
            color="black" if first else None,
            zorder=3 if first else 2,
        )
    ax.axhline(risk, color="grey", ls="--", lw=1, label=f"target risk {risk:g}")
    ax.set_xlabel("coverage (share of questions answered)")
    ax.set_ylabel("selective risk (share of answered that are wrong)")
    ax.set_title(f"Risk-coverage: {title}")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "risk_coverage.png", dpi=120)
    plt.close(fig)

    lift = methods[0]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    finite = np.isfinite(lift.final)
    lo, hi = float(lift.final[finite].min()), float(lift.final[finite].max())
    bins = [lo + (hi - lo) * i / 40 for i in range(41)]
    for label, mask, color in (("correct", correct, "tab:green"), ("wrong", ~correct, "tab:red")):
        ax.hist(
            lift.final[finite & mask],
            bins=bins,
            alpha=0.55,
            density=True,
            label=f"{label} (n={int((finite & mask).sum())})",
            color=color,
        )
    ax.set_xlabel(f"final score of the '{lift.name}' certificate (nats)")
    ax.set_ylabel("density")
    ax.set_title(f"Certificate score, correct vs wrong: {title}")
    ax.legend(fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "score_distribution.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    names = [m.name for m in methods]
    read = [100 * results[n]["tokens_read_fraction"] for n in names]
    cov = [100 * results[n]["coverage_mean"] for n in names]
    x = np.arange(len(names))
    ax.bar(x - 0.2, read, 0.4, label="tokens read before the verdict (%)", color="tab:blue")
    ax.bar(x + 0.2, cov, 0.4, label=f"coverage at risk {risk:g} (%)", color="tab:orange")
    ax.set_xticks(x, names)
    ax.set_ylabel("percent")
    ax.set_ylim(0, 130)
    ax.set_title(f"Tokens read and coverage: {title}")
    ax.legend(fontsize=9, loc="upper center", ncol=2)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(out / "tokens_read.png", dpi=120)
    plt.close(fig)

    rows = [
        f"| {n} | {r['coverage_mean']:.1%} | {r['risk_mean']:.3f} | "
        f"{r['risk_violation_rate']:.0%} | {r['auroc']:.3f} | {r['tokens_read_fraction']:.0%} | "
        f"{r['tokens_read_median']:.0%} |"
        for n, r in results.items()
    ]
    report = out / "report.md"
    report.write_text(
        f"# liftguard eval: {title}\n\n"
        f"Target risk {risk:g}. Coverage, risk and violations are test-split means over "
        f"random 50/50 splits; AUROC is of each method's final score.\n\n"
        "| method | coverage | test risk | violations | AUROC | tokens read (mean) | (median) |\n"
        "|---|---:|---:|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n\n"
        "![risk-coverage](risk_coverage.png)\n\n"
        "![score distribution](score_distribution.png)\n\n"
        "![tokens read](tokens_read.png)\n",
        encoding="utf-8",
    )
    return report

"""Learning curves per env: success on the training rollouts at every step, and held-out success at every
evaluation, each the mean over seeds (the band spans the lowest and highest seed). matplotlib (the
``bench`` extra) is imported here only, with the Agg backend: no display is needed."""

from __future__ import annotations

import os
import re
import statistics
from pathlib import Path

from prover.bench.tables import CellResult
from prover.errors import ConfigError

# what installs the ``bench`` extra from this repository (``prover`` is not on PyPI), or matplotlib alone
INSTALL_HINT = "pip install -e '.[bench]' in the prover checkout, or pip install 'matplotlib>=3.7'"


def curves_unavailable() -> str | None:
    """Why no learning curve can be drawn (matplotlib missing), or None. ``prover bench`` asks before any
    cell trains, so the user hears it at once rather than after the whole matrix."""
    try:
        import matplotlib  # noqa: F401  (the optional bench extra: only asked whether it is installed)
    except ImportError:
        return f"learning curves skipped: matplotlib is not installed ({INSTALL_HINT}); the tables are written anyway"
    return None


def _curve(results: list[CellResult], phase: str, key: str) -> tuple[list[int], list[float], list[float],
                                                                     list[float]]:
    """Steps, mean, min and max over seeds of ``key``, at the steps every seed logged."""
    per_seed = [{rec["step"]: float(rec[key]) for rec in r.history
                 if rec.get("phase") == phase and key in rec} for r in results]
    steps = sorted(set.intersection(*(set(s) for s in per_seed))) if per_seed else []
    values = [[s[x] for s in per_seed] for x in steps]
    return steps, [statistics.fmean(v) for v in values], [min(v) for v in values], [max(v) for v in values]


def curve_file(out: Path, env: str) -> Path:
    return out / f"curves-{re.sub(r'[^A-Za-z0-9._-]', '_', env)}.png"


def plot_env(results: list[CellResult], methods: list[str], env: str, out: Path) -> Path | None:
    """One PNG for ``env`` with a line per method; None when no cell of it has finished."""
    mine = [r for r in results if r.env == env]
    if not mine:
        return None
    try:
        # matplotlib is the optional bench extra: imported only to draw
        import matplotlib

        matplotlib.use("Agg")
        # pyplot once the backend is set (Agg: no display); the same optional extra
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError as exc:
        raise ConfigError(f"learning curves need matplotlib: {INSTALL_HINT}") from exc
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), constrained_layout=True)
    panels = [("train", "rollout/success", "training rollouts"),
              ("eval", "eval/success", "held-out evaluation")]
    for ax, (phase, key, title) in zip(axes, panels):
        for i, m in enumerate(methods):
            steps, mean, low, high = _curve([r for r in mine if r.method == m], phase, key)
            if not steps:
                continue
            color = plt.get_cmap("tab10")(i % 10)
            ax.plot(steps, mean, marker="o", markersize=3, color=color, label=m)
            if len({r.seed for r in mine if r.method == m}) > 1:
                ax.fill_between(steps, low, high, color=color, alpha=0.15, linewidth=0)
        ax.set_title(f"{env}: {title}", fontsize=10)
        ax.set_xlabel("RL step")
        ax.set_ylabel("success")
        ax.set_ylim(-0.02, 1.02)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8, loc="best")
    path = curve_file(out, env)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.png")  # whole or not at all: benches may share `out`
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
    return path

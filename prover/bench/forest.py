"""A bench's forest plot: per env, each method's final held-out success minus the baseline's on the same seed,
the mean and the 95% paired t interval over seeds (Table 1's "Δ vs baseline" column, the interval its verdict
reads), drawn as ``forest.svg`` beside results.md (``prover.commands.svgchart``: no plotting library needed)."""

from __future__ import annotations

from pathlib import Path

from prover.bench import stats
from prover.bench.tables import CellResult, per_seed
from prover.commands.svgchart import ForestRow, forest_chart, standalone
from prover.system.files import write_atomic

FILE = "forest.svg"


def _success(r: CellResult) -> float:
    return r.success


def difference_row(method: str, paired: stats.Paired) -> ForestRow:
    """One method's row, in points: the mean difference and its t interval (none from a single pair)."""
    t = paired.t
    mean, lo, hi = (None if v is None else 100 * v for v in (t.mean, t.lo, t.hi))
    pairs = f"{paired.pairs} pair{'s' if paired.pairs != 1 else ''}"
    text = f"{mean:+.1f}" + ("" if lo is None else f" [{lo:+.1f}, {hi:+.1f}]")
    return ForestRow(method, mean, lo, hi, f"{text}, {pairs}")


def forest_rows(results: list[CellResult], methods: list[str], envs: list[str], baseline: str) -> list[ForestRow]:
    """Per env (a heading row when there are several), a row per method paired with ``baseline`` on at least
    one seed, in ``methods``' order."""
    rows: list[ForestRow] = []
    for env in envs:
        base = per_seed(results, baseline, [env], _success)
        mine = [difference_row(m, p) for m in methods if m != baseline
                if (p := stats.paired(per_seed(results, m, [env], _success), base)).pairs]
        if mine:
            rows += ([ForestRow(env)] if len(envs) > 1 else []) + mine
    return rows


def forest_svg(results: list[CellResult], methods: list[str], envs: list[str], baseline: str) -> str | None:
    """The plot as a standalone SVG file's text; None when no method shares a seed with ``baseline``."""
    rows = forest_rows(results, methods, envs, baseline)
    if not rows:
        return None
    where = f"{envs[0]}: " if len(envs) == 1 else ""
    return standalone(forest_chart(f"{where}final held-out success, method − {baseline}, paired by seed", rows,
                                   "difference in points: mean and 95% paired t interval over seeds"))


def write_forest(results: list[CellResult], methods: list[str], envs: list[str], baseline: str,
                 out: Path) -> Path | None:
    """``out/forest.svg``, or None (and nothing written) when there is nothing to pair."""
    svg = forest_svg(results, methods, envs, baseline)
    if svg is None:
        return None
    write_atomic(out / FILE, svg)
    return out / FILE


def caption(baseline: str) -> str:
    """What the plot shows, for the page that embeds it."""
    return (f"Per env, each method's final held-out success minus {baseline}'s on the same seed (seeds that "
            "either side did not finish are left out): the dot is the mean difference in points, the bar its "
            "95% paired t interval, mean ± t(0.975, n−1) · sd / √n over the n pairs (Table 1's Δ column). "
            "Green: the interval lies above 0; red: below; blue: it spans 0.")


def forest_markdown(path: Path, baseline: str) -> list[str]:
    """results.md's section for the plot."""
    return [f"## Paired differences against {baseline}", "", f"![Forest plot: differences against {baseline}]"
            f"({path.name})", "", caption(baseline), ""]

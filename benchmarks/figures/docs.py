"""The documentation's figures, drawn from committed results only, and the check that they are current.

    python -m benchmarks.figures.docs --render   # rewrite every figure below from the committed results
    python -m benchmarks.figures.docs --check    # exit 1 when a committed figure is not what they draw

- docs/bench/<bench>/forest.svg: each bench's paired differences against grpo (``bench_forests``);
- docs/bench/judges-hit-minus-chance.svg: the judges' hit rate minus chance (``judges``);
- docs/img/smollm2-grpo-curves.svg: the real-model runs' learning curves (``curves``).

docs/perf.md's phase split is drawn with that page (``python -m benchmarks.perf.page --render``, ``--check``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks.figures import bench_forests, curves, judges, render_or_check
from prover.system.files import write_atomic

ROOT = Path(__file__).resolve().parents[2]


def figures() -> dict[Path, Callable[[], str]]:
    """Every figure file and what draws it."""
    return {**bench_forests.figures(), judges.FIGURE: judges.figure, curves.FIGURE: curves.figure}


def stale(drawn: dict[Path, str]) -> list[Path]:
    return [path for path, text in drawn.items() if not path.is_file() or path.read_text() != text]


def main(argv: list[str] | None = None) -> int:
    check = render_or_check(__doc__, "rewrite every figure from the committed results",
                            "only say which committed figures are out of date", argv)
    drawn = {path: draw() for path, draw in figures().items()}  # every figure drawn before any is written
    if check:
        old = stale(drawn)
        for path in old:
            print(f"{path.relative_to(ROOT)} is not what its data draw: python -m benchmarks.figures.docs --render")
        print(f"{len(drawn) - len(old)} of {len(drawn)} figures are current")
        return 1 if old else 0
    for path, text in drawn.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)
        print(f"wrote {path.relative_to(ROOT)} ({len(text.encode()) / 1024:.1f} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

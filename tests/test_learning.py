"""RL teaches a pretrained model a multi-turn skill: SmolLM2-135M-Instruct on a small fixed pivot-sim.

The testbed's task (benchmarks/configs/bench_testbed.yaml) made small enough for CI: one rack of three items,
two steps down the corridor, its right item named only on the sign of the first observation (``clue:
memory``), the expert 4 turns. The testbed's recipe otherwise: a clean warm start (16 expert episodes at lr
1e-5, no random actions) that teaches the action format but leaves the choice at the rack near chance; then
GRPO with LoRA, 4 tasks x 4 episodes a step at lr 3e-4. The test asserts that held-out success (the same 64
tasks before and after) rises by a margin that chance does not give, not only that the job runs.

The margin comes from tuning seeds, never from the test's own seed: see GAIN.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from prover.system.environment import cpu, native_bfloat16

pytestmark = pytest.mark.slow(minutes=10)  # trains a 135M-parameter model: ~10 minutes of one core with AMX
TIMEOUT_S = 3600  # in float32 on an AVX2 CPU the run takes about 25 minutes of one core

# The testbed samples and updates in bfloat16, which a CPU with AVX512-BF16 or AMX multiplies in hardware; on one
# without, torch converts bfloat16 in software and the run would take hours, so there the same setting runs in
# float32 (the margin below holds in both: see GAIN).
BFLOAT16 = native_bfloat16(cpu()["flags"]) is not False
PRECISION = (["model.engine_dtype=bfloat16", "learner.autocast=bfloat16"] if BFLOAT16
             else ["model.engine_dtype=float32", "learner.autocast=off"])
SETTING = [
    "env.name=pivot-sim",
    "env.kwargs={prompt: full, n_pivots: 1, n_options: 3, clue: memory, delay: 1, irrelevant_share: 0.75, "
    "unseen_items: false}",
    "model.lora={enabled: true, rank: 16, alpha: 32}", *PRECISION,
    "rollout.context=chat", "rollout.max_turns=8", "rollout.groups_per_step=4", "rollout.group_size=4",
    "learner.lr=3e-4", "learner.micro_batch_rows=4", "learner.engine_is_cap=2.0",
    "credit.name=grpo", "judge.name=null", "threads=1",
    "warmstart.enabled=true", "warmstart.episodes=16", "warmstart.random_action_share=0.0", "warmstart.lr=1e-5",
    "warmstart.prompt_loss_weight=0",
    "eval.episodes=64", "eval.temperature=1.0", "eval.every=0", "steps=24", "seed=0",
]
# Points of held-out success (of 1), set on tuning seeds before this seed ran: seeds 101 and 102 gained +50.0
# (0.375 -> 0.875) and +35.9 (0.438 -> 0.797) in these 24 steps, seed 100 +17.2 in 16. Two 64-episode
# evaluations differ by chance with a standard error of at most 8.8 points, so chance passes 20 with p ~ 1%. In
# float32 (an AVX2 CPU) tuning seed 101 gained +57.8 before this seed ran; this seed then gained +57.8 and, with
# the update taking PPO's old log-probs from its own forward pass, +60.9.
GAIN = 0.2


def test_grpo_raises_a_pretrained_models_held_out_success(smollm2_dir, tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "prover.cli", "train", *SETTING, f"model.path={smollm2_dir}",
                           f"run.dir={run_dir}"],
                          capture_output=True, text=True, timeout=TIMEOUT_S, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    success = {r["step"]: r["eval/success"] for r in rows if r["phase"] == "eval"}
    assert sorted(success) == [0, 24]  # held-out success before and after RL only: each evaluation costs ~2 steps
    assert min(r["eval/format_valid"] for r in rows if r["phase"] == "eval") > 0.9  # the warm start's format held
    assert success[24] - success[0] >= GAIN, f"held-out success {success[0]:.3f} -> {success[24]:.3f}: {success}"

"""The share of a training step spent outside model forward and backward passes.

    python -m benchmarks.perf.step_overhead [--steps 3] [overrides ...]

Builds a run with the default config (tiny model, alfworld-sim) and a shorter warm start (200
episodes, one epoch; pass warmstart.* overrides to change it) in a temporary folder, with
``learner.skip_zero_advantage_rows=false`` so that every step trains on every row even when the short
warm start wins nothing,
then times training steps phase by phase while counting the wall time spent inside the policy's
forward calls (sampling and training) and inside backward. Everything else (env steps, prompt
rendering, tokenization, padding, credit, optimizer, weight sync) is framework overhead. Ratios are
within one run, so a busy machine shifts both sides alike.
"""

from __future__ import annotations

import argparse
import functools
import tempfile
import time

from prover.config_load import load_config
from prover.trainer import Trainer, task_seeds


class Clock:
    def __init__(self) -> None:
        self.seconds = 0.0
        self.depth = 0

    def wrap(self, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            if self.depth:  # nested calls (generate -> forward) count once
                return fn(*args, **kwargs)
            self.depth += 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0
                self.depth -= 1
        return timed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fixed = ["warmstart.episodes=200", "warmstart.epochs=1", "learner.skip_zero_advantage_rows=false"]
        cfg = load_config(None, [f"run.dir={tmp}", "steps=0", *fixed, *args.overrides])
        trainer = Trainer(cfg)
        model_clock = Clock()
        for model in (trainer.engine.model, trainer.learner.unwrapped()):
            model.forward = model_clock.wrap(model.forward)
        acc = trainer.learner.accelerator
        acc.backward = model_clock.wrap(acc.backward)
        rows = []
        for step in range(1, args.steps + 1):
            model_clock.seconds = 0.0
            t = {}
            t0 = time.perf_counter()
            batch = trainer.rollout.run(task_seeds(cfg, step), cfg.rollout.group_size, seed=step)
            t["rollout"] = time.perf_counter() - t0
            adv = trainer.credit.assign(batch, trainer.ctx)
            t["credit"] = time.perf_counter() - t0 - t["rollout"]
            trainer.learner.update(batch, adv)
            t["learner"] = time.perf_counter() - t0 - t["rollout"] - t["credit"]
            trainer.engine.update_weights(trainer.learner)
            total = time.perf_counter() - t0
            rows.append((step, total, model_clock.seconds, t["rollout"] / total, t["learner"] / total))
    print("| step | step s | model fwd+bwd s | outside model | rollout share | learner share |")
    print("|---|---|---|---|---|---|")
    for step, total, model_s, rollout_share, learner_share in rows:
        print(f"| {step} | {total:.2f} | {model_s:.2f} | {1 - model_s / total:.1%} | {rollout_share:.1%} "
              f"| {learner_share:.1%} |")
    tot = sum(r[1] for r in rows)
    mod = sum(r[2] for r in rows)
    print(f"\nall steps: {1 - mod / tot:.1%} of step time outside model forward/backward")


if __name__ == "__main__":
    main()

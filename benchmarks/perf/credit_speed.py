"""Time each credit method takes on a fixed recorded batch, and what the Brancher costs.

    python -m benchmarks.perf.credit_speed [--groups 16] [--group-size 8] [--max-turns 50]

The batch is recorded once from alfworld-sim with a noisy expert (no model): 16 groups x 8 episodes of
up to 50 turns, 8 completion tokens a turn, snapshots on. Advantage time excludes generation: branching
methods get their continuation outcomes from a recorded table (filled by the same noisy expert), so the
clock sees only the method's own arithmetic. The Brancher is then timed separately on a fixed set of
requests with a tiny policy, reporting its generated tokens and wall time.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time

import numpy as np

from prover.config_load import load_config
from prover.credit.base import CreditContext
from prover.envs import make_env
from prover.episodes.branching import Brancher, BranchRequest, BranchResult
from prover.errors import ProverError
from prover.judges import make_judge
from prover.registry import CREDIT
from prover.types import Batch, Group, Trajectory, Turn


def record_batch(groups: int, size: int, max_turns: int, noise: float = 0.85) -> Batch:
    env, rng = make_env("alfworld-sim"), random.Random(0)
    out = []
    for g in range(groups):
        trajs = []
        for i in range(size):
            obs, info = env.reset(seed=g)
            traj = Trajectory(f"{g}#{i}", f"train/{g}", info["task"])
            for _t in range(max_turns):
                action = rng.choice(info["admissible_actions"]) if rng.random() < noise else env.expert_action()
                turn = Turn(prompt_ids=[1] * 100, completion_ids=[2] * 8,
                            logprobs=[float(np.log(rng.uniform(0.3, 1.0))) for _ in range(8)], observation=obs,
                            completion_text="",
                            action=action, format_valid=True, action_valid=True, reward=0.0,
                            state_key=env.state_key(), snapshot=env.snapshot())
                obs, turn.reward, term, trunc, info = env.step(action)
                traj.turns.append(turn)
                if term or trunc:
                    traj.won = bool(info["won"])
                    break
            trajs.append(traj)
        out.append(Group(f"train/{g}", trajs))
    return Batch(out)


class RecordedOutcomes:
    """Continuation outcomes from a table, so that timing excludes generation."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def continue_from(self, requests, seed=0):
        return [BranchResult(r, np.array([self.rng.random() < 0.3 for _ in range(r.n)]), 0, [])
                for r in requests]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-turns", type=int, default=50)
    args = ap.parse_args()
    batch = record_batch(args.groups, args.group_size, args.max_turns)
    n_turns = len(batch.turns())
    print(f"recorded batch: {args.groups} groups x {args.group_size} episodes, {n_turns} turns, "
          f"success {np.mean([t.won for g in batch.groups for t in g.trajectories]):.2f}\n")
    print("| method | advantage ms | per 1k turns ms |")
    print("|---|---|---|")
    cfg = load_config(None, [])
    judge = make_judge(cfg)  # the default judge (contrast: free and deterministic), for ProVer
    for name in CREDIT.names():
        if name in ("spo-tree", "tree-grpo"):  # its advantage is its tree of generations; nothing is left without them
            print(f"| {name} | (all generation; see the Brancher line) | |")
            continue
        method = CREDIT.get(name)()
        ctx = CreditContext(cfg, brancher=RecordedOutcomes(random.Random(1)), judge=judge)
        t0 = time.perf_counter()
        try:
            method.assign(batch, ctx)
        except ProverError as exc:  # e.g. CriticSearch's default critic is a hosted LLM that needs a key
            print(f"| {name} | not timed: {str(exc).splitlines()[0][:120]} | |")
            continue
        ms = (time.perf_counter() - t0) * 1e3
        print(f"| {name} | {ms:.1f} | {ms / n_turns * 1000:.1f} |")

    from prover.engines.hf import HFEngine
    from prover.policy.tiny import build_tiny_policy
    from prover.rollout import Rollout
    from prover.types import SamplingParams

    with tempfile.TemporaryDirectory() as tmp:
        folder = build_tiny_policy(lambda: make_env("alfworld-sim"), tmp, corpus_episodes=50)
        rollout = Rollout(lambda: make_env("alfworld-sim"), HFEngine(folder), max_turns=args.max_turns,
                          sampling=SamplingParams(max_new_tokens=8))
        trajs = [tr for g in batch.groups[:4] for tr in g.trajectories[:1] if len(tr.turns) > 4]
        requests = [BranchRequest(tr, len(tr.turns) // 2, 2) for tr in trajs]
        brancher = Brancher(rollout)
        t0 = time.perf_counter()
        results = brancher.continue_from(requests, seed=0)
        wall = time.perf_counter() - t0
    tokens = sum(r.tokens for r in results)
    print(f"\nBrancher: {len(requests)} requests x 2 continuations from mid-episode states: "
          f"{tokens} tokens in {wall:.1f} s ({tokens / wall:.0f} tokens/s, untrained tiny policy)")


if __name__ == "__main__":
    main()

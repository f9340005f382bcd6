"""How faithful the engine's sampling log-probs are to the learner's: PPO's ratio at step 0, before any update.

    python -m benchmarks.perf.logprob_match [--models tiny,smollm2] [--env alfworld-sim] [--groups 4]
        [--group-size 4] [--max-turns 5] [--new-tokens 32] [--threads 1] [--out FILE]
    python -m benchmarks.perf.logprob_match --smoke --out FILE    (the tiny policy, a few seconds)

For each model and each engine precision (``model.engine_dtype`` float32 and bfloat16), a batch is sampled
through the run's own code: ``make_engine`` (the ``hf`` engine and its decode loop), ``build_rollout`` in the
chat context (``rollout.context=chat``) on the env, at the config's sampling settings (temperature 1). The
learner, in float32 and in float32 under bfloat16 autocast (``learner.autocast``), then takes its log-probs
of the same tokens as its update does (``rows_from``, ``sequence_rows``, ``Learner.policy_logprobs``: the
forward pass of ``row_logits`` without a gradient), and per token log rho = logp_learner - logp_engine.
Reported per setting: tokens, mean |log rho|, the share of tokens with rho outside PPO's clip range
[1 - learner.clip_low, 1 + learner.clip_high], the largest |log rho|, and what truncated importance sampling
(``learner.engine_is_cap``) at cap 2 would weigh the tokens: the mean weight and the share capped. Also the
seconds of the rollout and of the learner's log-prob pass (what the correction adds to a step), under
whatever load the machine had (``measured``).

Models: ``tiny`` (the run's tiny policy, freshly initialised from the env's text: no warm start, so its
distributions are near uniform) and ``smollm2`` (SmolLM2-135M-Instruct from ``prover convert-gguf``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.perf.bandwidth import cpu
from benchmarks.perf.results import RESULTS, stamp

OUT = RESULTS / "logprob-match.json"
ENGINES = ("float32", "bfloat16")
LEARNERS = {"float32": "off", "float32 + bfloat16 autocast": "bfloat16"}
IS_CAP = 2.0


def sample(cfg, folder: str, engine_dtype: str):
    """One rollout batch of ``cfg``'s shape, sampled by the ``hf`` engine in ``engine_dtype``."""
    from prover.engines import make_engine
    from prover.envs import make_configured_env
    from prover.rollout import build_rollout

    engine = make_engine(cfg.engine.name, folder, dtype=engine_dtype, **cfg.engine.kwargs)
    rollout = build_rollout(cfg, engine, lambda: make_configured_env(cfg.env))
    try:
        return rollout.run(list(range(cfg.rollout.groups_per_step)), cfg.rollout.group_size, seed=cfg.seed)
    finally:
        rollout.close()


def log_ratios(learner, batch) -> np.ndarray:
    """logp_learner - logp_engine of every sampled token, the learner's as its update forwards them."""
    from prover.learning.learner_rows import rows_from, sequence_rows
    from prover.types import Advantages

    ones = [[[np.ones(t.n_tokens, np.float32) for t in tr.turns] for tr in g.trajectories] for g in batch.groups]
    rows = rows_from(batch, Advantages(values=ones), skip_zero=False)
    units = sequence_rows(rows, learner.cfg.max_row_tokens) if learner.cfg.sequence_rows else list(rows)
    logps = learner.policy_logprobs(units)
    return np.concatenate([lp - row.old_logprobs for unit, lps in zip(units, logps)
                           for row, lp in zip(unit.turn_rows, lps)])


def ratio_stats(log_rho: np.ndarray, cfg) -> dict:
    import torch

    from prover.learning.learner_loss import engine_is_weights, mismatch_metrics, mismatch_sums

    t = torch.as_tensor(log_rho, dtype=torch.float64)
    metrics = mismatch_metrics(mismatch_sums(t, cfg))
    weights = engine_is_weights(t, torch.zeros_like(t), IS_CAP)
    return {"tokens": int(t.numel()), "mean_abs_log_rho": metrics["learner/engine_abs_log_rho"],
            "share_outside_clip": metrics["learner/engine_outside_clip"],
            "max_abs_log_rho": metrics["learner/engine_max_abs_log_rho"],
            "tis_mean_weight": float(weights.mean()), "tis_capped_share": float((t.exp() > IS_CAP).double().mean())}


def measure_model(name: str, folder: str, cfg) -> dict:
    from prover.config import LearnerConfig
    from prover.learning.learner import Learner

    learners = {label: Learner(folder, LearnerConfig(**{**cfg.learner.model_dump(), "autocast": autocast}),
                               dtype="float32", max_completion_tokens=cfg.rollout.sampling.max_new_tokens,
                               seed=cfg.seed)
                for label, autocast in LEARNERS.items()}
    out: dict = {}
    for engine_dtype in ENGINES:
        start = time.perf_counter()
        batch = sample(cfg, folder, engine_dtype)
        sampled_s = time.perf_counter() - start
        for label, learner in learners.items():
            start = time.perf_counter()
            log_rho = log_ratios(learner, batch)
            recompute_s = time.perf_counter() - start
            stats = ratio_stats(log_rho, cfg.learner)
            out[f"engine {engine_dtype} / learner {label}"] = {**stats, "turns": len(batch.turns()),
                                                                "rollout_s": round(sampled_s, 1),
                                                                "recompute_s": round(recompute_s, 1)}
            print(f"{name}: engine {engine_dtype:8s} learner {label:28s} " + " ".join(
                f"{k}={v:.3g}" for k, v in stats.items()), flush=True)
    return out


def model_folder(name: str, cfg, tmp: str) -> str:
    if name == "tiny":
        from prover.envs import make_configured_env
        from prover.policy.tiny import build_tiny_policy

        t = cfg.model.tiny
        return str(build_tiny_policy(lambda: make_configured_env(cfg.env), tmp, vocab_size=t.vocab_size,
                                     hidden_size=t.hidden_size, num_layers=t.num_layers, num_heads=t.num_heads,
                                     intermediate_size=t.intermediate_size, corpus_episodes=t.corpus_episodes,
                                     seed=cfg.seed))
    if name == "smollm2":
        from prover.judges.gguf_convert import convert

        return str(convert()[0])
    raise SystemExit(f"logprob_match: unknown model {name!r} (tiny, smollm2)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny,smollm2")
    ap.add_argument("--env", default="alfworld-sim")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-turns", type=int, default=5)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--smoke", action="store_true", help="the tiny policy, 1 x 2 episodes of 2 turns")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.smoke:
        args.models, args.groups, args.group_size, args.max_turns, args.new_tokens = "tiny", 1, 2, 2, 8
    import torch

    from prover.config_load import load_config

    torch.set_num_threads(args.threads)
    cfg = load_config(None, [f"env.name={args.env}", "rollout.context=chat", f"rollout.groups_per_step={args.groups}",
                             f"rollout.group_size={args.group_size}", f"rollout.max_turns={args.max_turns}",
                             f"rollout.sampling.max_new_tokens={args.new_tokens}"])
    start = time.perf_counter()
    result: dict = {"command": "python -m benchmarks.perf.logprob_match " + " ".join(sys.argv[1:]),
                    "env": args.env, "context": "chat", "clip_range": [1 - cfg.learner.clip_low,
                                                                       1 + cfg.learner.clip_high],
                    "temperature": cfg.rollout.sampling.temperature, "tis_cap": IS_CAP, "threads": args.threads,
                    "cpu": cpu(), "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            result["models"][name] = measure_model(name, model_folder(name, cfg, tmp), cfg)
    result["measured"] = stamp(time.perf_counter() - start)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

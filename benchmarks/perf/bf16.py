"""bfloat16 on this CPU for a real model: what it buys the engine and the learner, and what it changes.

    python -m benchmarks.perf.bf16 [--model DIR] [--rounds 3] [--threads 1]

On SmolLM2-135M-Instruct (``prover convert-gguf``'s folder), all in this process at ``--threads``:

- peak:    the best matrix-product GFLOP/s of a (1024 x 576) @ (576 x 1536) product (SmolLM2's MLP) in
           float32 and in bfloat16 (AVX512-BF16 where the CPU has it);
- engine:  the hf engine generating 16 tokens greedily for 8 pivot-sim chat openings, float32 against
           bfloat16 weights, alternated ``--rounds`` times (best round each), and how many of the 8 greedy rows
           are token-identical;
- ratio:   what bfloat16 sampling does to PPO's ratio at step 0: 8 completions sampled at temperature 1 by
           the bfloat16 engine, their log-probs recomputed by the float32 model (the learner's), and
           rho = exp(logp_learner - logp_engine) per token: mean |log rho|, the largest |rho - 1|, and the
           share of tokens outside PPO's clip range [1 - 0.2, 1 + 0.28]; the same for a float32 engine;
- learner: one forward and backward pass of those 8 rows (prompt + completion), float32 against bfloat16
           autocast, alternated, best round each.

Writes benchmarks/results/perf/bf16.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from benchmarks.perf.results import best_seconds

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "perf" / "bf16.json"
CLIP_LOW, CLIP_HIGH = 0.2, 0.28  # prover's learner defaults (learner.clip_low / clip_high)


def openings(tokenizer, n: int = 8) -> list[list[int]]:
    from prover.envs import make_env
    from prover.episodes.episode_chat import EpisodeChat
    from prover.episodes.turn_prompts import agent_spec_for

    chat, prompts = EpisodeChat(tokenizer), []
    for seed in range(n):
        env = make_env("pivot-sim", prompt="full")
        obs, info = env.reset(seed=seed, options={"split": "train"})
        spec = agent_spec_for(env)
        prompts.append(chat.opening(spec.chat_opening(str(info.get("task", obs)), obs, info["admissible_actions"])))
    return prompts


def ratio_stats(engine_lp: list[list[float]], learner_lp: list) -> dict:
    logs = torch.cat([torch.as_tensor(b, dtype=torch.float64) - torch.as_tensor(a, dtype=torch.float64)
                      for a, b in zip(engine_lp, learner_lp)])
    rho = logs.exp()
    outside = ((rho < 1 - CLIP_LOW) | (rho > 1 + CLIP_HIGH)).double().mean()
    return {"tokens": int(logs.numel()), "mean_abs_log_ratio": float(logs.abs().mean()),
            "max_abs_ratio_minus_1": float((rho - 1).abs().max()), "share_outside_clip": float(outside)}


def learner_pass(model, prompts, completions, pad_id: int, autocast: bool) -> None:
    from prover.learning.logprobs import completion_logits, gather_logprobs

    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits, targets, mask = completion_logits(model, prompts, completions, pad_id)
        loss = -(gather_logprobs(logits.float(), targets) * mask).sum()
    loss.backward()
    model.zero_grad(set_to_none=True)


def measure(model_dir: str, rounds: int) -> dict:
    from benchmarks.perf.limits import matmul_gflops
    from prover.engines.hf import HFEngine
    from prover.types import SamplingParams

    # SmolLM2's MLP: 1024 tokens of width 576 through its 1536-wide projection
    out: dict = {"peak_gflops": {name: matmul_gflops(1024, 576, 1536, seconds=0.3, dtype=dtype)
                                 for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16))}}
    engines = {d: HFEngine(model_dir, dtype=d, prefix_cache_mb=0) for d in ("float32", "bfloat16")}
    prompts = openings(engines["float32"].tokenizer)
    greedy = SamplingParams(max_new_tokens=16, temperature=0.0)
    outs = {d: e.generate(prompts, greedy) for d, e in engines.items()}
    out["engine_s"] = {d: best_seconds(lambda e=e: e.generate(prompts, greedy), rounds) for d, e in engines.items()}
    out["greedy_rows_identical"] = sum(a.token_ids == b.token_ids for a, b in zip(outs["float32"], outs["bfloat16"]))
    sampled = SamplingParams(max_new_tokens=16, temperature=1.0)
    out["ratio"] = {}
    for d, engine in engines.items():
        gens = engine.generate(prompts, sampled, seed=1)
        learner_lp = engines["float32"].logprobs(prompts, [g.token_ids for g in gens])
        out["ratio"][d] = ratio_stats([g.logprobs for g in gens], learner_lp)
    from prover.learning.modeling import load_model

    model = load_model(model_dir, "float32", "cpu").train()  # the learner's own copy, as a run has (own_weights)
    completions = [g.token_ids for g in outs["float32"]]
    pad = engines["float32"].pad_id
    out["learner_s"] = {name: best_seconds(lambda a=auto: learner_pass(model, prompts, completions, pad, a), rounds)
                        for name, auto in (("float32", False), ("bfloat16 autocast", True))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="policy folder (default: SmolLM2-135M-Instruct from prover convert-gguf)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.model is None:
        from prover.judges.gguf_convert import convert

        args.model = str(convert()[0])
    res = {"model": Path(args.model).name, "threads": args.threads, "rounds": args.rounds,
           **measure(args.model, args.rounds)}
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()

"""What sharing prompt prefixes saves the ``hf`` engine: rollout-like ``generate`` calls, sharing on and off.

    python -m benchmarks.perf.prefix_sharing [--env pivot-sim] [--model PATH] [--new-tokens 32] [--repeats 5]

Three calls of 16 prompts, each made by two engines on the same weights, ``share_prefixes`` on and off (the
run's default tiny policy, built from the env's text, unless --model names a checkpoint folder). The prefix
cache kept across calls is off in both (``prefix_cache_mb=0``: the repeats would hit it);
benchmarks/perf/kv_cache.py measures it:

- turn 0: 4 groups x 4 episodes, each group one task's first prompt (exact duplicates);
- branch: K=4 continuations from each of 4 boundaries at turn 3 (exact duplicates, with history);
- turn 3: 16 distinct episodes at turn 3 (only the env's common header is shared).

Each call runs with ``max_new_tokens=1`` (the prefill and one step) and with --new-tokens, greedy, so both
engines generate the same tokens (checked). Times are medians of --repeats, on and off interleaved, in one
process: read the off/on ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time

from prover.engines.hf import HFEngine
from prover.envs import make_env
from prover.episodes.turn_prompts import agent_spec_for, encode_prompt
from prover.types import SamplingParams


def prompt_at(tok, env_name: str, task: int, turn: int, seed: int = 0) -> list[int]:
    """The prompt of one episode of ``task`` at ``turn``, after a noisy expert's moves (its history shown)."""
    env, rng = make_env(env_name), random.Random(seed * 1000 + task)
    spec = agent_spec_for(env)
    obs, info = env.reset(seed=task, options={"split": "train"})
    task_text, history = str(info.get("task", obs)), []
    for _ in range(turn):
        actions = list(info.get("admissible_actions") or [])
        expert = env.expert_action()
        action = rng.choice(actions) if actions and (expert is None or rng.random() < 0.3) else expert or "look"
        history.append((obs, action))
        obs, _, term, trunc, info = env.step(action)
        if term or trunc:
            break
    return encode_prompt(tok, spec.render(task_text, obs, info.get("admissible_actions"), history, len(history)))


def calls(tok, env_name: str) -> dict[str, list[list[int]]]:
    return {
        "turn 0, 4 groups x 4": [prompt_at(tok, env_name, g, 0) for g in range(4) for _ in range(4)],
        "branch, 4 boundaries x K=4": [prompt_at(tok, env_name, b, 3) for b in range(4) for _ in range(4)],
        "turn 3, 16 distinct": [prompt_at(tok, env_name, e, 3) for e in range(16)],
    }


def timed(engine: HFEngine, prompts: list[list[int]], params: SamplingParams) -> tuple[float, list]:
    start = time.perf_counter()
    gens = engine.generate(prompts, params, seed=0)
    return time.perf_counter() - start, gens


def measure(on: HFEngine, off: HFEngine, prompts: list[list[int]], new_tokens: int, repeats: int) -> str:
    params = SamplingParams(max_new_tokens=new_tokens, temperature=0.0)
    times: dict[str, list[float]] = {"on": [], "off": []}
    on.take_counts(), off.take_counts()  # from here on: this measurement's calls only
    for _ in range(repeats):
        for name, engine in (("on", on), ("off", off)):
            seconds, gens = timed(engine, prompts, params)
            times[name].append(seconds)
            if name == "on":
                shared = gens
        same = all(a.token_ids == b.token_ids for a, b in zip(shared, gens))
    t_on, t_off = statistics.median(times["on"]), statistics.median(times["off"])
    counts = on.take_counts()
    off.take_counts()
    computed = counts["cost/prompt_tokens"] - counts["cost/cached_tokens"]
    return (f"{new_tokens:>4} new | on {t_on * 1000:8.1f} ms  off {t_off * 1000:8.1f} ms  off/on {t_off / t_on:5.2f}x"
            " | "
            f"prefill {computed / repeats:6.0f} of {counts['cost/prompt_tokens'] / repeats:6.0f} tokens "
            f"({counts['engine/cached_ratio']:.0%} shared) | same tokens: {'yes' if same else 'NO'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="pivot-sim")
    ap.add_argument("--model", default=None, help="a checkpoint folder; default: the run's tiny policy")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.model
        if folder is None:
            from prover.policy.tiny import build_tiny_policy

            folder = build_tiny_policy(lambda: make_env(args.env), tmp)  # the run's defaults (model.tiny)
        on = HFEngine(folder, device=args.device, prefix_cache_mb=0)  # within a call only: repeats would hit it
        off = HFEngine(folder, device=args.device, share_prefixes=False)
        print(f"{args.env}, {folder if args.model else 'tiny policy'} on {args.device} ({on.sharing} sharing)")
        for name, prompts in calls(on.tokenizer, args.env).items():
            lengths = sorted(len(p) for p in prompts)
            print(f"{name}: prompts of {lengths[0]}-{lengths[-1]} tokens")
            timed(on, prompts, SamplingParams(max_new_tokens=1, temperature=0.0))  # warm up both
            timed(off, prompts, SamplingParams(max_new_tokens=1, temperature=0.0))
            for new_tokens in (1, args.new_tokens):
                print("  " + measure(on, off, prompts, new_tokens, args.repeats))


if __name__ == "__main__":
    main()

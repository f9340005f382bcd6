"""What the ``hf`` engine's prefix cache saves on append-only multi-turn chats: the cache on and off, side by side.

    python -m benchmarks.perf.kv_cache [--turns 8] [--episodes 8] [--new-tokens 16] [--obs-tokens 40]
                                       [--models tiny,smollm2] [--out benchmarks/results/kv_cache.json]

For each model (the run's default tiny policy built from pivot-sim's text; SmolLM2-135M-Instruct from
``prover convert-gguf``'s folder, ~/.cache/prover/models/smollm2-135m-instruct, when it is there), two
engines on the same weights: the default (prefix cache on) and ``share_prefixes=false`` (no reuse of KV at
all). Both play the same --episodes pivot-sim episodes as one growing chat each: turn 0's prompt is the
task's first prompt as the rollout encodes it; every later turn appends the completion the cached engine
generated (--new-tokens, greedy) and about --obs-tokens tokens of the env's next observation (an expert's
move). Each turn is one ``generate`` call of all episodes, the two engines interleaved turn by turn in one
process: read the ratios, not the seconds.

Reported per model: the time with the cache off over on, after each turn T (the ratio grows with T, as
each turn's prompt grows and the cache serves all but its new tokens); the prefill tokens each computed
per unique chat token (the episodes' final prompts and completions: 1.0 would be every token run once);
and whether the greedy completions were the same (they should be, to float rounding).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "kv_cache.json"
SMOLLM2 = Path.home() / ".cache" / "prover" / "models" / "smollm2-135m-instruct"


def episodes(tok, n: int, obs_tokens: int, turns: int) -> tuple[list[list[int]], list[list[list[int]]]]:
    """Each episode's first prompt, and the observation tokens appended at each later turn."""
    from prover.envs import make_env
    from prover.episodes.turn_prompts import agent_spec_for, encode_prompt

    firsts, observations = [], []
    for task in range(n):
        env, rng = make_env("pivot-sim"), random.Random(task)
        spec = agent_spec_for(env)
        obs, info = env.reset(seed=task, options={"split": "train"})
        firsts.append(encode_prompt(tok, spec.render(str(info.get("task", obs)), obs, info.get("admissible_actions"),
                                                     [], 0)))
        seen = []
        for _ in range(turns - 1):
            action = env.expert_action() or rng.choice(list(info.get("admissible_actions") or ["look"]))
            obs, _, term, trunc, info = env.step(action)
            if term or trunc:
                obs, info = env.reset(seed=task + 1000 * (len(seen) + 1), options={"split": "train"})
            ids = tok.encode(f"\n{obs}\n", add_special_tokens=False)
            seen.append((ids * (obs_tokens // max(len(ids), 1) + 1))[:obs_tokens])
        observations.append(seen)
    return firsts, observations


def play(engines: dict, firsts, observations, turns: int, new_tokens: int) -> dict:
    from prover.types import SamplingParams

    params = SamplingParams(max_new_tokens=new_tokens, temperature=0.0)
    prompts = [list(p) for p in firsts]
    seconds = {name: [] for name in engines}
    prefill = dict.fromkeys(engines, 0.0)
    same = total = 0
    for e in engines.values():
        e.take_counts()
    for turn in range(turns):
        gens = {}
        for name, engine in engines.items():
            t0 = time.perf_counter()
            gens[name] = engine.generate(prompts, params)
            seconds[name].append(time.perf_counter() - t0)
            prefill[name] += engine.take_counts()["cost/prefill_tokens"]
        same += sum(a.token_ids == b.token_ids for a, b in zip(gens["on"], gens["off"]))
        total += len(prompts)
        if turn + 1 < turns:
            prompts = [p + g.token_ids + obs[turn] for p, g, obs in zip(prompts, gens["on"], observations)]
    unique = sum(len(p) + len(g.token_ids) for p, g in zip(prompts, gens["on"]))
    return {"seconds": seconds, "prefill": prefill, "unique": unique, "same": same, "total": total,
            "final_prompt_tokens": [len(p) for p in prompts]}


def measure_model(name: str, folder: str, args: argparse.Namespace) -> tuple[dict, list[str]]:
    from prover.engines.hf import HFEngine

    on = HFEngine(folder, device="cpu")
    off = HFEngine(folder, device="cpu", share_prefixes=False)
    off.model.load_state_dict(on.model.state_dict())
    firsts, observations = episodes(on.tokenizer, args.episodes, args.obs_tokens, args.turns)
    play({"on": on, "off": off}, firsts[:2], observations, 1, 2)  # warm up both
    on.prefix_cache.clear()
    r = play({"on": on, "off": off}, firsts, observations, args.turns, args.new_tokens)
    cum_on = cum_off = 0.0
    ratios = []
    for t_on, t_off in zip(r["seconds"]["on"], r["seconds"]["off"]):
        cum_on, cum_off = cum_on + t_on, cum_off + t_off
        ratios.append(cum_off / cum_on)
    per_unique = {k: v / r["unique"] for k, v in r["prefill"].items()}
    lengths = r["final_prompt_tokens"]
    lines = [f"{name}: {args.episodes} episodes x {args.turns} turns, {args.new_tokens} new tokens and "
             f"~{args.obs_tokens} observation tokens a turn; final prompts {min(lengths)}-{max(lengths)} tokens",
             "  time, cache off / on, over turns 1..T: " + " ".join(f"{x:.2f}" for x in ratios),
             f"  {args.turns} turns: off {cum_off:.1f} s, on {cum_on:.1f} s: {ratios[-1]:.2f}x",
             f"  prefill tokens per unique chat token: off {per_unique['off']:.2f}, on {per_unique['on']:.2f} "
             f"({r['unique']} unique tokens)",
             f"  same greedy completions: {r['same']} of {r['total']}"]
    summary = {"off_over_on": ratios[-1], "off_over_on_by_turn": ratios, "prefill_per_unique": per_unique,
               "same": r["same"], "total": r["total"], "seconds": {"on": cum_on, "off": cum_off}}
    return summary, lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--obs-tokens", type=int, default=40)
    ap.add_argument("--models", default="tiny,smollm2")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    import torch

    from prover.envs import make_env
    from prover.policy.tiny import build_tiny_policy

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    start, load0 = time.time(), os.getloadavg()[0]
    summaries, output = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            if name == "tiny":
                folder = build_tiny_policy(lambda: make_env("pivot-sim"), tmp)  # the run's defaults (model.tiny)
            elif name == "smollm2" and SMOLLM2.is_dir():
                folder = str(SMOLLM2)
            else:
                output.append(f"{name}: skipped (no model folder; `prover convert-gguf` builds SmolLM2's)")
                print(output[-1], flush=True)
                continue
            summaries[name], lines = measure_model(name, str(folder), args)
            output += lines
            print("\n".join(lines), flush=True)
    result = {"command": "python -m benchmarks.perf.kv_cache " + " ".join(sys.argv[1:]), "output": "\n".join(output),
              "summary": summaries,
              "measured": {"seconds": time.time() - start, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                           "load_avg_1m": load0, "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
                           "python": platform.python_version()}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

"""Peak memory of one RL update of SmolLM2-135M-Instruct by ``learner.micro_batch_rows``: what the real-model
job's default is chosen from (the value that fits 24 GB, by measurement).

    python -m benchmarks.perf.micro_batch_memory [--rows 4,16,64] [--shape recipe|long] [--lora on|off]

Each value runs in its own process (peak resident memory, ``ru_maxrss``, is per process and never goes
down): load the learner (SmolLM2 from ~/.cache/prover/models/smollm2-135m-instruct, LoRA rank 16 as the job
trains, or every weight with --lora off), then one update of a step's chats. "load only" is the same process
without the update: the difference is what the update itself costs.

Shapes (synthetic token ids; the learner's memory depends on the lengths, not the values):
- ``recipe``: the job's step at its largest (examples/configs/smollm2-pivot-chat.yaml, 16 episodes x 4
  turns, an opening of 180 tokens, completions of 24, replies of 40: 6.3k unique tokens, where the
  reported seeds' steps held at most 4.0k);
- ``long``: what a user who raises rollout.max_turns and sampling.max_new_tokens gets (16 x 16 turns,
  completions of 64, replies of 80: about 37k unique tokens).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.perf.learner_sequences import SMOLLM2, chats

SHAPES = {"recipe": dict(episodes=16, turns=4, first=180, observation=40, completion=24),
          "long": dict(episodes=16, turns=16, first=180, observation=80, completion=64)}


def child(rows: int, shape: str, lora: bool, update: bool) -> dict:
    """One measurement, in this process: the learner, then (with ``update``) one update."""
    import torch

    from prover.config import LearnerConfig, LoraConfig
    from prover.learning.learner import Learner

    torch.manual_seed(0)
    cfg = LearnerConfig(micro_batch_rows=rows, mini_batch_rows=4096)
    learner = Learner(SMOLLM2, cfg, max_completion_tokens=SHAPES[shape]["completion"],
                      lora=LoraConfig(enabled=True, rank=16, alpha=32) if lora else None)
    seconds, tokens = 0.0, 0
    if update:
        batch, adv = chats(**SHAPES[shape], vocab=49152)
        start = time.perf_counter()
        stats = learner.update(batch, adv)
        seconds, tokens = time.perf_counter() - start, int(stats["learner/unique_tokens"])
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kB on Linux
    return {"micro_batch_rows": rows, "update": update, "peak_gb": round(peak_gb, 2),
            "update_s": round(seconds, 1), "unique_tokens": tokens}


def run_child(rows: int, shape: str, lora: bool, update: bool) -> dict:
    argv = [sys.executable, "-m", "benchmarks.perf.micro_batch_memory", "--child", str(rows), "--shape", shape,
            "--lora", "on" if lora else "off"] + ([] if update else ["--load-only"])
    out = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        return {"micro_batch_rows": rows, "update": update, "error": out.stderr.strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="4,16,64", help="micro_batch_rows values, comma-separated")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="recipe")
    parser.add_argument("--lora", choices=["on", "off"], default="on")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--load-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help="also write the results here as JSON")
    args = parser.parse_args()
    lora = args.lora == "on"
    if args.child is not None:
        print(json.dumps(child(args.child, args.shape, lora, not args.load_only)))
        return
    if not SMOLLM2.is_dir():
        sys.exit(f"error: no model folder {SMOLLM2}; run `prover convert-gguf` first")
    values = [int(v) for v in args.rows.split(",")]
    results = [run_child(values[0], args.shape, lora, update=False)]
    print(f"load only: peak {results[0].get('peak_gb')} GB", flush=True)
    for rows in values:
        results.append(run_child(rows, args.shape, lora, update=True))
        r = results[-1]
        print(f"micro_batch_rows {rows:4d}: peak {r.get('peak_gb')} GB, update {r.get('update_s')} s, "
              f"{r.get('unique_tokens')} unique tokens {r.get('error', '')}", flush=True)
    report = {"command": " ".join(["python -m benchmarks.perf.micro_batch_memory"] + sys.argv[1:]),
              "shape": args.shape, "settings": SHAPES[args.shape], "lora": lora, "results": results}
    print(json.dumps(report, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()

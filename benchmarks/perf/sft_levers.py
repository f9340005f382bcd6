"""Two ways to run the main job's warm-start SFT batches faster without changing the recipe.

    python -m benchmarks.perf.sft_levers [--batches 25] [--rounds 4]

The main job's tiny policy (built as `prover train` builds it) and its SFT rows (noisy-expert alfworld-sim
turns, as the warm start draws them), in batches of 8, each trained by the SFT's own loss step at one torch
thread, three ways in one process, alternating round by round so that each sees the same load:

- eager: today's step;
- compiled: the model's forward through ``torch.compile`` (inductor, dynamic shapes), its compile time
  measured apart, before the rounds;
- bf16 autocast: the forward under ``torch.autocast("cpu", torch.bfloat16)`` (fast on CPUs with AVX512-BF16).

Each way trains its own copy of the same initial weights on the same batches. Writes
benchmarks/results/perf/sft_levers.json, which docs/perf.md's main-job section reads.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "perf" / "sft_levers.json"


def sft_step(model, optimizer, chunk, pad_id, bf16: bool) -> None:
    """One SFT batch as ``Learner.sft`` trains it (prompt tokens weigh 1, as the tiny default does)."""
    import torch

    from prover.learning.logprobs import completion_logits, gather_logprobs

    optimizer.zero_grad(set_to_none=True)
    cast = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    with cast:
        logits, targets, mask = completion_logits(model, [p[:1] for p, _ in chunk], [p[1:] + c for p, c in chunk],
                                                  pad_id)
    nll = -gather_logprobs(logits.float(), targets)
    (torch.where(mask, nll, torch.zeros_like(nll)).sum() / mask.sum()).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()


def ways(base: Path) -> dict:
    """name -> (model, optimizer, bf16), each from the same initial weights."""
    import torch

    from prover.learning.modeling import load_model

    out = {}
    for name in ("eager", "compiled", "bf16 autocast"):
        model = load_model(base)
        if name == "compiled":
            model.forward = torch.compile(model.forward, dynamic=True)
        out[name] = (model, torch.optim.AdamW(model.parameters(), lr=1e-3), name == "bf16 autocast")
    return out


def inductor_cache() -> Path:
    """Where inductor keeps compiled graphs and kernels between processes (its default)."""
    import getpass

    return Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or Path(tempfile.gettempdir()) /
                f"torchinductor_{getpass.getuser()}")


def measure(n_batches: int, rounds: int) -> dict:
    import torch

    from prover.envs import make_env
    from prover.learning.modeling import load_tokenizer
    from prover.policy.tiny import build_tiny_policy
    from prover.policy.warmstart import expert_rows

    torch.set_num_threads(1)
    # a fresh machine compiles from nothing; a second run reads compiled graphs back from this folder
    cold = not (inductor_cache() / "fxgraph").is_dir()
    with tempfile.TemporaryDirectory() as tmp:
        base = build_tiny_policy(lambda: make_env("alfworld-sim"), Path(tmp) / "base")
        tok = load_tokenizer(base)
        rows = expert_rows(lambda: make_env("alfworld-sim"), tok, episodes=60, random_share=0.1, seed=5, max_turns=20)
        rows.sort(key=lambda r: len(r[0]) + len(r[1]))  # length bands, as length_batches cuts them
        batches = [rows[i:i + 8] for i in range(0, len(rows) - 8, 8)]
        random.Random(0).shuffle(batches)
        batches = batches[:n_batches]
        arms = ways(base)
        compile_s = time.perf_counter()
        for chunk in (batches[0], max(batches, key=lambda b: len(b[-1][0]))):  # short and long shapes
            sft_step(*arms["compiled"][:2], chunk, tok.pad_token_id, False)
        compile_s = time.perf_counter() - compile_s
        rounds_s: dict[str, list[float]] = {name: [] for name in arms}
        for r in range(rounds):
            for name, (model, opt, bf16) in arms.items():
                t0 = time.perf_counter()
                for chunk in batches:
                    sft_step(model, opt, chunk, tok.pad_token_id, bf16)
                rounds_s[name].append(time.perf_counter() - t0)
            print(f"[sft-levers] round {r + 1}/{rounds}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in
                                                                         rounds_s.items()), flush=True)
    # the first round is apart: the compiled model meets new shapes there and compiles again
    steady = {k: sum(v[1:]) for k, v in rounds_s.items()}
    return {"batches_per_round": n_batches, "rounds": rounds, "compile_s": compile_s, "rounds_s": rounds_s,
            "inductor_cache": "empty" if cold else "kept from an earlier run",
            "load_avg_1m": os.getloadavg()[0], "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "ways": {k: {"batches_per_s": n_batches * (rounds - 1) / v, "time_vs_eager": v / steady["eager"],
                         "first_round_extra_s": rounds_s[k][0] - v / (rounds - 1)} for k, v in steady.items()}}


def sentence(res: dict) -> str:
    w, comp = res["ways"], res["ways"]["compiled"]
    return (f"Two ways to run the same batches faster, measured by `python -m benchmarks.perf.sft_levers` "
            f"({res['date']}, load average {res['load_avg_1m']:.1f}; {res['rounds']} rounds of "
            f"{res['batches_per_round']} batches of the main job's rows per way, alternating in one process, one "
            "thread). `torch.compile` (inductor, "
            f"dynamic shapes; inductor's on-disk cache {res['inductor_cache']}) compiled for {res['compile_s']:.0f} s "
            f"on two shapes and {comp['first_round_extra_s']:.0f} s more on the first round's, then ran at "
            f"{comp['batches_per_s']:.2f} batches/s against eager's "
            f"{w['eager']['batches_per_s']:.2f} ({1 / comp['time_vs_eager']:.2f}x): on the default SFT's 2,512 "
            f"batches that saves about {2512 / w['eager']['batches_per_s'] - 2512 / comp['batches_per_s']:.0f} s "
            f"for {res['compile_s'] + comp['first_round_extra_s']:.0f} s or more of compiling (each new batch "
            f"shape can compile again). bf16 autocast (this CPU has AVX512-BF16) took "
            f"{w['bf16 autocast']['time_vs_eager']:.2f}x eager's time: it speeds the matrix products, and at a "
            "hidden size of 128 most of the time is in the small operations between them.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, default=25)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    res = measure(args.batches, args.rounds)
    RESULTS.write_text(json.dumps(res, indent=1))
    print(sentence(res))


if __name__ == "__main__":
    main()

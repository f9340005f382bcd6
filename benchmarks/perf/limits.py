"""The limit: this CPU's matrix-product peak, the FLOP/s each phase of the main job achieves against it, and
two levers (torch threads; length-banded batches) measured side by side in the same run.

    python -m benchmarks.perf.limits [--policy DIR] [--sft-episodes 40] [--eval-episodes 64]

Writes benchmarks/results/perf/limits.json only; ``python -m benchmarks.perf.page --render`` then shows it in
docs/perf.md ("The limit", rendered by benchmarks.perf.page_limits). ``python -m benchmarks.perf.run
--sections limits`` measures it and rewrites the page in one go. What it runs, all in this process:

- peak:    fp32 matrix products with torch at 1 and 2 threads, at the tiny model's shapes and at large ones
           (best of a few rounds: the machine is shared, and the best round is the least disturbed).
- phases:  the main job's phases at 1 thread (the default ``threads`` for the tiny model), from the policy
           the main job's warm start builds (``prover sft`` defaults in runs/limits, reused once built):
           the SFT on ``--sft-episodes`` expert episodes from the untrained base, and one ProVer step
           (rollout, Brancher, learner) between two evaluations of ``--eval-episodes``, with every forward
           pass counted by benchmarks.perf.flops (real tokens against the padded rectangle).
- threads: SFT batches/s and a smaller RL step (2 groups of 8) at 1 and 2 torch threads, alternated.
- padding: the SFT's batches drawn at random (the old way) against length bands (``length_batches``), and
           the RL update's micro-batches in shuffled order against by length (``micro_batch_order``): the
           padding share each reports and its time, on the same rows.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.perf.flops import Meter
from benchmarks.perf.results import RENDER_HINT, RESULTS, ROOT

# (label, m, k, n): an (m x k) @ (k x n) product
SHAPES = [("tiny: SFT micro-batch through the MLP (8 rows x 125 tokens)", 1000, 128, 384),
          ("tiny: SFT micro-batch through the LM head", 1000, 128, 2048),
          ("tiny: one decode step of 64 rows through the MLP", 64, 128, 384),
          ("large: 1024 tokens through a 0.5B Qwen's MLP", 1024, 896, 4864),
          ("large: 2048 x 2048 x 2048", 2048, 2048, 2048)]


# -- peak ------------------------------------------------------------------------------------------------
def matmul_gflops(m: int, k: int, n: int, rounds: int = 5, seconds: float = 0.15,
                  dtype: torch.dtype = torch.float32) -> float:
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    torch.mm(a, b)
    best = 0.0
    for _ in range(rounds):
        reps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            torch.mm(a, b)
            reps += 1
        best = max(best, 2.0 * m * k * n * reps / (time.perf_counter() - t0) / 1e9)
    return best


def measure_peak() -> list[dict]:
    rows = []
    for label, m, k, n in SHAPES:
        speeds = {}
        for threads in (1, 2):
            torch.set_num_threads(threads)
            speeds[str(threads)] = matmul_gflops(m, k, n)
        rows.append({"shape": label, "m": m, "k": k, "n": n, "gflops": speeds})
        print(f"[limits] peak {label}: {speeds}", flush=True)
    torch.set_num_threads(1)
    return rows


# -- the main job's policies and SFT rows -----------------------------------------------------------------
def make_env_fn():
    from prover.envs import make_env

    return lambda: make_env("alfworld-sim")


def policies(policy: str | None) -> tuple[Path, Path]:
    """The main job's untrained base and its warm-started policy (built once in runs/limits, or ``policy``)."""
    from prover.config_load import load_config
    from prover.learning.model_folder import model_spec
    from prover.policy import base_policy, prepare_policy
    from prover.progress import Reporter
    from prover.rundir.run import RunDir

    cfg = load_config(None, [f"run.dir={ROOT / 'runs' / 'limits'}"])
    run = RunDir(cfg)
    run.start(fresh=False)
    base = base_policy(cfg, model_spec(cfg.model), run, make_env_fn())
    warm = Path(policy) if policy else prepare_policy(cfg, run, make_env_fn(), Reporter())
    return base, warm


def sft_rows(base: Path, episodes: int) -> list:
    from prover.config import TrainConfig
    from prover.episodes.turn_prompts import prompt_budget
    from prover.learning.modeling import load_tokenizer
    from prover.policy.warmstart import expert_rows

    cfg = TrainConfig()
    return expert_rows(make_env_fn(), load_tokenizer(base), episodes=episodes, seed=0,
                       random_share=cfg.warmstart.random_action_share, max_turns=cfg.rollout.max_turns,
                       max_prompt_tokens=prompt_budget(None, cfg.rollout.sampling.max_new_tokens, 4096))


def sft_learner(base: Path):
    from prover.config import TrainConfig
    from prover.learning.learner import Learner

    return Learner(base, TrainConfig().learner.model_copy(update={"lr": 1e-3}), seed=0)


# -- phases ------------------------------------------------------------------------------------------------
def phase_sft(meter: Meter, base: Path, rows: list) -> dict:
    learner = sft_learner(base)
    meter.watch(learner.unwrapped())
    with meter.phase("sft"):
        stats = learner.sft(rows, 1, 8, prompt_weight=1.0)
    return {"rows": len(rows), "batches": -(-len(rows) // 8), **stats}


def metered(meter: Meter, name: str, fn, keep: list | None = None, outer_only: bool = False):
    """``fn`` run inside ``meter.phase(name)`` (``outer_only``: only when no other phase is on); ``keep``
    collects its arguments."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if keep is not None:
            keep.append(args)
        if outer_only and meter.current != "other":
            return fn(*args, **kwargs)
        with meter.phase(name):
            return fn(*args, **kwargs)
    return wrapper


def rl_config(warm: Path, run_dir: str, threads: int, *extra: str):
    from prover.config_load import load_config

    return load_config(None, [f"model.path={warm}", "warmstart.enabled=false", "steps=1", f"threads={threads}",
                              f"run.dir={run_dir}", *extra])


def phase_rl(meter: Meter, warm: Path, eval_episodes: int) -> tuple[dict, tuple]:
    """One ProVer step of the main job between two evaluations; returns its metrics row and the learner's
    (batch, advantages)."""
    from prover.progress import Reporter
    from prover.trainer import Trainer

    kept: list = []
    with tempfile.TemporaryDirectory() as tmp:
        tr = Trainer(rl_config(warm, tmp, 1, f"eval.episodes={eval_episodes}"), reporter=Reporter(quiet=True))
        meter.watch_engine(tr.engine)
        meter.watch(tr.learner.unwrapped())
        tr.evaluate = metered(meter, "evaluation", tr.evaluate)
        tr.rollout.run = metered(meter, "rollout", tr.rollout.run, outer_only=True)
        tr.brancher.continue_from = metered(meter, "Brancher", tr.brancher.continue_from)
        tr.learner.update = metered(meter, "learner", tr.learner.update, keep=kept)
        tr.train()
        rows = [json.loads(x) for x in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    step = next(r for r in rows if r["phase"] == "train")
    return step, kept[0]


@torch.no_grad()
def step_floor(warm: Path, context: int = 128, reps: int = 20) -> dict:
    """Milliseconds of one decode step (1 new token after ``context`` cached ones) for 1 and 64 rows: the
    fixed cost of a step against the cost of its rows."""
    from prover.engines.prefix import cache_kwarg, cache_of
    from prover.learning.modeling import load_model

    model = load_model(warm).eval()
    out = {}
    for rows in (1, 64):
        ids = torch.randint(3, 500, (rows, context))
        cache = cache_of(model(input_ids=ids, use_cache=True))
        best = float("inf")
        for _ in range(reps):  # as generate steps: the cache grows by the new token each time
            n = cache.get_seq_length()
            kwargs = {cache_kwarg(model): cache, "attention_mask": torch.ones(rows, n + 1, dtype=torch.long),
                      "position_ids": torch.full((rows, 1), n)}
            t0 = time.perf_counter()
            model(input_ids=ids[:, -1:], use_cache=True, logits_to_keep=1, **kwargs)
            best = min(best, time.perf_counter() - t0)
        out[str(rows)] = 1000 * best
    return out


# -- levers ------------------------------------------------------------------------------------------------
def sft_speed(learner, rows: list, threads: int) -> float:
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    learner.sft(rows, 1, 8, prompt_weight=1.0)
    return -(-len(rows) // 8) / (time.perf_counter() - t0)


def rl_step_seconds(warm: Path, threads: int) -> float:
    from prover.progress import Reporter
    from prover.trainer import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        Trainer(rl_config(warm, tmp, threads, "eval.episodes=1", "rollout.groups_per_step=2"),
                reporter=Reporter(quiet=True)).train()
        rows = [json.loads(x) for x in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    return next(r["time/step"] for r in rows if r["phase"] == "train")


def lever_threads(base: Path, warm: Path, rows: list) -> dict:
    """1 and 2 threads alternated, twice each for the SFT (batches/s) and once each for an RL step (s)."""
    learner, rows = sft_learner(base), rows[:96]  # 12 batches: at 2 threads each can take seconds
    sft = {"1": [], "2": []}
    for threads in (1, 2, 1, 2):
        sft[str(threads)].append(sft_speed(learner, rows, threads))
        print(f"[limits] SFT at {threads} thread(s): {sft[str(threads)][-1]:.2f} batches/s", flush=True)
    rl = {}
    for threads in (1, 2):
        rl[str(threads)] = rl_step_seconds(warm, threads)
        print(f"[limits] RL step at {threads} thread(s): {rl[str(threads)]:.1f} s", flush=True)
    torch.set_num_threads(1)
    return {"sft_batches_per_s": sft, "sft_rows": len(rows), "rl_step_s": rl, "load_avg": os.getloadavg()[0]}


def padded_run(what: str, fn, base: Path, warm: Path, rows: list, kept: tuple) -> tuple[float, float]:
    """One epoch of SFT on ``rows`` or one RL update on ``kept``, on a fresh learner, with ``fn`` batching
    its rows; returns (padding share, seconds)."""
    import prover.learning.learner as lm

    by_band, by_length = lm.length_batches, lm.micro_batch_order
    try:
        if what == "sft":
            lm.length_batches, learner = fn, sft_learner(base)
            t0 = time.perf_counter()
            return learner.sft(rows, 1, 8, prompt_weight=1.0)["sft/padding_share"], time.perf_counter() - t0
        lm.micro_batch_order = fn
        learner = lm.Learner(warm, lm.LearnerConfig(), max_completion_tokens=24, seed=0)
        t0 = time.perf_counter()
        return learner.update(*kept)["learner/padding_share"], time.perf_counter() - t0
    finally:
        lm.length_batches, lm.micro_batch_order = by_band, by_length


def lever_padding(base: Path, warm: Path, rows: list, kept: tuple) -> dict:
    """The same rows batched the old way and the new way, alternated twice: padding share and seconds."""
    import prover.learning.learner as lm

    variants = {"sft": {"random batches (before)": functools.partial(lm.length_batches, pool=1),
                        "length bands": lm.length_batches},
                "learner": {"shuffled order (before)": lambda lengths: list(range(len(lengths))),
                            "by length": lm.micro_batch_order}}
    out: dict = {what: {label: {"seconds": []} for label in ways} for what, ways in variants.items()}
    for what, ways in variants.items():
        for _ in range(2):
            for label, fn in ways.items():
                share, seconds = padded_run(what, fn, base, warm, rows, kept)
                out[what][label]["padding_share"] = share
                out[what][label]["seconds"].append(seconds)
                print(f"[limits] {what}, {label}: padding {share:.1%}, {seconds:.1f} s", flush=True)
    return out


# -- main ---------------------------------------------------------------------------------------------------
def measure(policy: str | None = None, sft_episodes: int = 40, eval_episodes: int = 64) -> dict:
    load = {"start": list(os.getloadavg())}
    torch.set_num_threads(1)
    peak = measure_peak()
    base, warm = policies(policy)
    rows = sft_rows(base, sft_episodes)
    meter = Meter()
    sft = phase_sft(meter, base, rows)
    step, kept = phase_rl(meter, warm, eval_episodes)
    torch.set_num_threads(1)
    phases_load, floor = os.getloadavg()[0], step_floor(warm)
    threads = lever_threads(base, warm, rows)
    padding = lever_padding(base, warm, rows, kept)
    load["end"] = list(os.getloadavg())
    step_keys = ("cost/rollout_tokens", "cost/branch_tokens", "cost/rollout_prompt_tokens",
                 "cost/rollout_cached_tokens", "cost/branch_prompt_tokens", "cost/branch_cached_tokens",
                 "learner/padding_share", "learner/rows", "time/rollout", "time/credit", "time/learner")
    return {"load": load, "phases_load_avg": phases_load, "cpus": os.cpu_count(), "policy": str(warm),
            "settings": {"sft_episodes": sft_episodes, "eval_episodes": eval_episodes, "threads": 1},
            "peak": peak, "step_floor_ms": floor, "sft": sft, "step": {k: step.get(k, 0.0) for k in step_keys},
            **meter.as_dict(),
            "levers": {"threads": threads, "padding": padding}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", help="warm-started policy for the RL phases (default: the main job's, built once "
                    "in runs/limits)")
    ap.add_argument("--sft-episodes", type=int, default=40, help="expert episodes whose turns the SFT phase trains on")
    ap.add_argument("--eval-episodes", type=int, default=64, help="episodes of each evaluation")
    args = ap.parse_args()
    t0 = time.perf_counter()
    result = measure(args.policy, args.sft_episodes, args.eval_episodes)
    result["measured"] = {"seconds": time.perf_counter() - t0, "date": time.strftime("%Y-%m-%d %H:%M UTC",
                          time.gmtime()), "load_avg_1m": result["load"]["end"][0], "cpus": os.cpu_count()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "limits.json").write_text(json.dumps(result, indent=1))
    print(f"wrote {RESULTS / 'limits.json'}; {RENDER_HINT}")


if __name__ == "__main__":
    main()

"""Where docs/perf.md's measurements are kept, and how they are read back: every module of benchmarks.perf that
measures writes one JSON file named here, and ``saved_results`` gathers them all for benchmarks.perf.page.

This module imports nothing else of benchmarks, so every measuring module and the page can import it without
an import circle between them."""

from __future__ import annotations

import json
import os
import platform
import re
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "perf"
# the sections that benchmarks.perf.run measures, in the order it runs them
SECTIONS = ("main", "verify", "overhead", "envs", "credit", "limits", "prefix", "cell", "later-cell")
# results/perf/<name>.json that other modules of benchmarks.perf write (main_job_recipes, sft_levers, the
# real-model scripts, bandwidth, kernel_rows, decode_vs_llama, step_ratio, logprob_match, learner_limit, learner_levers,
# stopped_rows)
OTHER_PERF = ("recipes", "sft_levers", "chat-step", "bf16", "branch-prefill", "bandwidth", "decode-vs-llama",
              "step-ratio-alfworld", "step-ratio-pivot2", "logprob-match", "learner-limit",
              "learner-levers", "kernel-rows", "bandwidth-avx2", "decode-vs-llama-avx2", "step-ratio-alfworld-avx2",
              "step-ratio-alfworld-noamx", "stopped-rows-avx512bf16", "stopped-rows-avx512", "stopped-rows-avx2",
              "bandwidth-noamx", "decode-vs-llama-noamx", "step-ratio-pivot2-noamx")
ASYNC = ROOT / "benchmarks" / "results" / "async_rollout.json"  # written by benchmarks.perf.async_rollout
KV_CACHE = ROOT / "benchmarks" / "results" / "kv_cache.json"  # benchmarks.perf.kv_cache
LEARNER_SEQUENCES = ROOT / "benchmarks" / "results" / "learner_sequences.json"  # benchmarks.perf.learner_sequences
RENDER_HINT = "docs/perf.md is not rewritten; run `python -m benchmarks.perf.page --render` to show it there"


def when(result: dict, key: str = "measured") -> str:
    """A section's provenance line, a quote block under its result: when it was measured, how long it took,
    under what load."""
    m = result.get(key, {})
    return (f"> {key.capitalize()} {m.get('date', '?')}, {m.get('seconds', 0):.0f} s, load average "
            f"{m.get('load_avg_1m', 0):.1f} on {m.get('cpus', '?')} CPUs.")


def today_command(command: str) -> str:
    """A saved result's command as it is run today: results measured before benchmarks/ became a package kept
    ``python benchmarks/NAME.py``, now ``python -m benchmarks.perf.NAME`` (every script these sections
    save a command for is in benchmarks/perf/)."""
    return re.sub(r"python benchmarks/(\w+)\.py", r"python -m benchmarks.perf.\1", command)


def stamp(seconds: float) -> dict:
    """The ``measured`` entry a section keeps beside its numbers (``when`` reads it)."""
    return {"seconds": seconds, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_avg_1m": os.getloadavg()[0], "cpus": os.cpu_count(), "python": platform.python_version()}


def best_seconds(fn, rounds: int, clock=time.perf_counter) -> float:
    """The fastest of ``rounds`` timed calls of ``fn``, after one untimed call (pages faulted in, caches warm);
    ``clock=time.process_time`` times this process's CPU seconds instead of the wall's."""
    fn()
    best = float("inf")
    for _ in range(rounds):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best


def load(section: str) -> dict:
    """One saved section of benchmarks.perf.run, or a one-line exit naming what to run first."""
    path = RESULTS / f"{section}.json"
    if not path.is_file():
        raise SystemExit(f"perf: no results for section {section!r} yet ({path}); run it first")
    return json.loads(path.read_text())


def saved_results() -> dict:
    """Every saved section, main_job_recipes' runs, and the results of sft_levers, async_rollout and the
    real-model scripts (chat_step, kv_cache, learner_sequences, bf16, branch_prefill), bandwidth,
    decode_vs_llama and step_ratio, where they exist."""
    results = {s: json.loads((RESULTS / f"{s}.json").read_text())
               for s in (*SECTIONS, *OTHER_PERF) if (RESULTS / f"{s}.json").is_file()}
    for name, path in (("async", ASYNC), ("kv-cache", KV_CACHE), ("learner-sequences", LEARNER_SEQUENCES)):
        if path.is_file():
            results[name] = json.loads(path.read_text())
    return results

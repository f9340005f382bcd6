"""LoRA (``model.lora``) against full fine-tuning of SmolLM2-135M-Instruct: peak memory, time per step,
checkpoint size and held-out success after the same few RL steps, on CPU.

    python -m benchmarks.studies.lora_vs_full [--model FOLDER] [--steps 2] [--json FILE] [overrides ...]
    python -m benchmarks.studies.lora_vs_full --table-from benchmarks/results/lora_vs_full.json   # reprint, run nothing

Runs ``prover train`` twice, each in its own process and temporary run folder, with identical settings (the
pretrained-policy recipe of docs/pretrained-policy.md on pivot-sim, shrunk so each run takes minutes) except
``model.lora.enabled``. Peak memory is the run process's maximum resident set (``wait4``'s ``ru_maxrss``:
model, engine copy, activations, gradients and optimizer together); times are the means over the RL steps of
metrics.jsonl's ``time/step`` and ``time/learner``; the checkpoint is the last one's folder on disk. Prints a
markdown table and writes the numbers, settings and command as JSON (``--json``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_MODEL = Path.home() / ".cache/prover/models/smollm2-135m-instruct"
# docs/pretrained-policy.md's command, smaller: 2 tasks x 4 episodes, 3 turns (the expert needs 2), 6 held-out
# episodes at temperature 0, so each run is a few minutes on one busy core
COMMON = ["env.name=pivot-sim", "env.kwargs.prompt=full", "env.kwargs.n_pivots=1", "env.kwargs.delay=1",
          "env.kwargs.irrelevant_share=0.5", "warmstart.enabled=false", "credit.name=grpo", "judge.name=null",
          "rollout.groups_per_step=2", "rollout.group_size=4", "rollout.max_turns=3", "eval.episodes=6",
          "eval.temperature=0", "learner.micro_batch_rows=4", "run.keep_checkpoints=1", "run.save_groups=0"]
MODES = {"full fine-tuning": ["model.lora.enabled=false"], "LoRA": ["model.lora.enabled=true"]}


def run_once(argv: list[str], log: Path) -> tuple[int, float, float]:
    """(exit code, peak resident GB, wall seconds) of ``prover train argv`` in a process of its own."""
    code = "import sys; from prover.cli import main; sys.exit(main(sys.argv[1:]))"
    t0 = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-c", code, "train", *argv], stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak, not the largest of all children so far
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_maxrss / 2 ** 20, time.perf_counter() - t0  # Linux reports KiB


def tensor_count(path: Path) -> int:
    """Numbers in a safetensors file (the trained ones: the adapter, or every weight)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        names = f.keys()
        return sum(math.prod(f.get_slice(k).get_shape()) for k in names)


def summarize(run_dir: Path, peak_gb: float, wall_s: float) -> dict:
    """The numbers of one finished run folder."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train = [r for r in rows if r["phase"] == "train"]
    evals = sorted((r for r in rows if r["phase"] == "eval"), key=lambda r: r["step"])
    [ckpt] = (run_dir / "checkpoints").glob("step-*")
    weights = ckpt / "adapter_model.safetensors"
    weights = weights if weights.is_file() else ckpt / "model.safetensors"
    return {"peak_rss_gb": peak_gb, "wall_s": wall_s,
            "step_s": sum(r["time/step"] for r in train) / len(train),
            "learner_s": sum(r["time/learner"] for r in train) / len(train),
            "rollout_s": sum(r["time/rollout"] for r in train) / len(train),
            "checkpoint_mb": sum(p.stat().st_size for p in ckpt.iterdir()) / 2 ** 20,
            "trained_params_m": tensor_count(weights) / 1e6,
            "success_before": evals[0]["eval/success"], "success_after": evals[-1]["eval/success"],
            "eval_episodes": int(evals[-1]["eval/episodes"]), "learner_rows": sum(r["learner/rows"] for r in train)}


def table(results: dict[str, dict], steps: int, model: str) -> str:
    names = list(results)
    lines = [f"| {model}, CPU | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]

    def row(label: str, fmt) -> None:
        lines.append(f"| {label} | " + " | ".join(fmt(results[n]) for n in names) + " |")
    row("trained parameters", lambda r: f"{r['trained_params_m']:.3g} M")
    row("peak memory (RSS)", lambda r: f"{r['peak_rss_gb']:.2f} GB")
    row("learner time per step", lambda r: f"{r['learner_s']:.0f} s")
    row("rollout time per step (about equal work in both)", lambda r: f"{r['rollout_s']:.0f} s")
    row("step time (rollout + learner + sync)", lambda r: f"{r['step_s']:.0f} s")
    row("checkpoint size", lambda r: f"{r['checkpoint_mb']:.0f} MB")
    row(f"held-out success, before → after {steps} steps",
        lambda r: f"{r['success_before']:.2f} → {r['success_after']:.2f} ({r['eval_episodes']} episodes)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="a local SmolLM2-135M-Instruct folder")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/lora_vs_full.json"))
    ap.add_argument("--table-from", type=Path, help="print the table of a JSON file this script wrote; run nothing")
    ap.add_argument("overrides", nargs="*", help="more overrides for both runs")
    args = ap.parse_args()
    if args.table_from is not None:
        saved = json.loads(args.table_from.read_text())
        steps = int(next(o for o in saved["overrides"] if o.startswith("steps=")).split("=")[1])
        model = Path(next(o for o in saved["overrides"] if o.startswith("model.path=")).split("=", 1)[1]).name
        print(table(saved["results"], steps, model))
        return
    common = [f"model.path={args.model}", f"steps={args.steps}", *COMMON, *args.overrides]
    results = {}
    with tempfile.TemporaryDirectory(prefix="lora-vs-full-") as tmp:
        for name, mode in MODES.items():
            run_dir = Path(tmp) / name.split()[0].lower()
            log = Path(tmp) / f"{run_dir.name}.log"
            rc, peak, wall = run_once([*common, *mode, f"run.dir={run_dir}"], log)
            if rc != 0:
                sys.exit(f"{name}: prover train exited {rc}:\n{log.read_text()[-3000:]}")
            results[name] = summarize(run_dir, peak, wall)
            print(f"{name}: {results[name]}", file=sys.stderr)
    text = table(results, args.steps, args.model.name)
    print(text)
    command = "OMP_NUM_THREADS=" + os.environ.get("OMP_NUM_THREADS", "") + " python " + shlex.join(sys.argv)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"command": command, "overrides": common, "modes": MODES, "results": results,
                                     "table": text}, indent=1) + "\n")


if __name__ == "__main__":
    main()

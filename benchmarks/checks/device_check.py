"""What benchmarks/checks/device_check.sh runs: `prover train` with the hf engine in three stages, numbers in one JSON.

    python -m benchmarks.checks.device_check --out FILE [--cpu] [--work DIR] [--steps N] [--budget-s S]

Stages, each its own `prover train` process (a stage that fails is recorded with its error; the rest run):

- tiny:        the tiny policy (built from a config, tokenizer trained on the env's text), warm start, RL.
- qwen35_2b:   a model of Qwen3.5-2B's shape with random weights (no download: built from QWEN35_2B below,
               with the tiny policy's tokenizer), in bf16. Its output is noise, so every turn runs to
               rollout.sampling.max_new_tokens, which keeps tokens/s comparable between runs.
- fsdp_1gpu:   the same model under `accelerate launch --config_file examples/accelerate/fsdp.yaml
               --num_processes 1`: FSDP2 on one GPU, bf16 compute, the hf engine loading gathered weights.

The JSON is rewritten after every stage, so a run stopped early keeps what it measured. ``--cpu`` runs the
same stages on CPU at toy sizes (a smoke test of the script itself); there accelerate would run the FSDP
config as plain DDP, so the FSDP stage sets accelerate's state up as on a GPU (prover.system.distributed.shard_on_cpu).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Qwen3.5-2B's text model (qwen3_5_text): hidden 2048, 24 layers (3 Gated DeltaNet to 1 full attention),
# 8 query / 2 key-value heads of 256, MLP 6144, vocabulary 248,320, tied embeddings; about 1.9B parameters.
QWEN35_2B = dict(
    vocab_size=248320, hidden_size=2048, intermediate_size=6144, num_hidden_layers=24, num_attention_heads=8,
    num_key_value_heads=2, head_dim=256, linear_num_key_heads=16, linear_num_value_heads=16,
    linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4, full_attention_interval=4,
    tie_word_embeddings=True, max_position_embeddings=32768, rms_norm_eps=1e-6)
# --cpu: the same architecture at toy size (a vocabulary still larger than the tokenizer's, as on the GPU)
QWEN35_TOY = dict(QWEN35_2B, vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=32, linear_num_key_heads=2,
                  linear_num_value_heads=2, linear_key_head_dim=16, linear_value_head_dim=16)

COMMON = ["env.name=alfworld-sim", "credit.name=grpo", "run.checkpoint_every=1000", "run.keep_checkpoints=1",
          # a random or barely trained policy earns nothing, so GRPO's advantages are zero: train on every
          # row anyway, with an entropy term that gives each a gradient, so the learner's work is measured
          "learner.skip_zero_advantage_rows=false", "learner.entropy_coef=0.001"]
SIZES = {  # per stage: GPU overrides, CPU overrides
    "tiny": (["warmstart.episodes=200", "warmstart.epochs=1", "rollout.groups_per_step=8", "rollout.group_size=8",
              "rollout.max_turns=8", "eval.episodes=16", "learner.mini_batch_rows=128",
              "learner.micro_batch_rows=64"],
             ["model.tiny.vocab_size=400", "model.tiny.hidden_size=32", "model.tiny.num_layers=2",
              "model.tiny.num_heads=2", "model.tiny.intermediate_size=64", "model.tiny.corpus_episodes=20",
              "warmstart.episodes=12", "warmstart.epochs=1", "rollout.groups_per_step=2", "rollout.group_size=3",
              "rollout.max_turns=4", "rollout.sampling.max_new_tokens=12", "eval.episodes=2",
              "learner.mini_batch_rows=16", "learner.micro_batch_rows=16"]),
    "big": (["warmstart.enabled=false", "model.dtype=bfloat16", "rollout.groups_per_step=4", "rollout.group_size=4",
             "rollout.max_turns=4", "rollout.sampling.max_new_tokens=64", "eval.episodes=4", "learner.lr=1e-6",
             "learner.mini_batch_rows=64", "learner.micro_batch_rows=16"],
            ["warmstart.enabled=false", "model.dtype=bfloat16", "rollout.groups_per_step=2", "rollout.group_size=2",
             "rollout.max_turns=3", "rollout.sampling.max_new_tokens=8", "eval.episodes=2", "learner.lr=1e-6",
             "learner.mini_batch_rows=16", "learner.micro_batch_rows=16"]),
}


def versions() -> dict:
    """What the numbers were measured with."""
    import importlib.metadata as md

    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}
    for name in ("transformers", "accelerate", "pydantic", "gymnasium", "flash-linear-attention"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def build_big_model(tokenizer_dir: Path, out: Path, shape: dict) -> int:
    """A qwen3_5_text folder with random bf16 weights of ``shape`` and the tiny policy's tokenizer; its size.

    The vocabulary stays the model's own: sampled ids the tokenizer lacks decode to nothing."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from prover.learning.modeling import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_dir)
    config = AutoConfig.for_model("qwen3_5_text", dtype="bfloat16", bos_token_id=tokenizer.bos_token_id,
                                  eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                                  **shape)
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):  # initialised where it runs: a 2B model builds in seconds on a GPU
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    params = sum(p.numel() for p in model.parameters())
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # this process's cached 4 GB would otherwise sit beside the stages' own
    return params


class GpuMemory:
    """The most GPU memory in use while a stage runs, read from nvidia-smi twice a second (any process)."""

    def __init__(self) -> None:
        self.peak, self._stop = None, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(0.5):
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=5).stdout.split()
                self.peak = max([self.peak or 0] + [int(x) for x in out if x.isdigit()])
            except (OSError, subprocess.SubprocessError):
                return

    def __enter__(self) -> GpuMemory:
        if shutil.which("nvidia-smi"):
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()


def summarize(metrics: Path) -> dict:
    """Tokens/s and seconds per step from a run's metrics.jsonl; "warm" leaves out step 1 (kernel warm-up)."""
    rows = [r for r in map(json.loads, metrics.read_text().splitlines()) if r.get("phase") == "train"]
    if not rows:
        return {}

    def per_s(key: str, clock: str, part: list[dict]) -> float | None:
        seconds = sum(r[clock] for r in part)
        return round(sum(r[key] for r in part) / seconds, 1) if seconds > 0 else None

    warm = rows[1:] or rows
    return {"steps": len(rows), "rollout_tokens": sum(r["cost/rollout_tokens"] for r in rows),
            "rollout_tokens_per_s": per_s("cost/rollout_tokens", "time/rollout", rows),
            "rollout_tokens_per_s_warm": per_s("cost/rollout_tokens", "time/rollout", warm),
            "learner_tokens_per_s_warm": per_s("learner/tokens", "time/learner", warm),
            "learner_rows_per_step": sum(r["learner/rows"] for r in rows) / len(rows),
            "learner_s_per_step_warm": round(sum(r["time/learner"] for r in warm) / len(warm), 3),
            "sync_s_per_step_warm": round(sum(r["time/sync"] for r in warm) / len(warm), 3),
            "step_s_warm": round(sum(r["time/step"] for r in warm) / len(warm), 3),
            "grad_norm_last": rows[-1]["learner/grad_norm"]}


def run_stage(cmd: list[str], run_dir: Path, timeout: float, env: dict) -> dict:
    """One `prover train` process: its numbers, or the end of its output when it fails."""
    t0 = time.perf_counter()
    log = run_dir.parent / f"{run_dir.name}.log"
    with GpuMemory() as mem, log.open("w") as out:
        try:
            rc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    result: dict = {"ok": rc == 0, "wall_s": round(time.perf_counter() - t0, 1), "peak_gpu_mib": mem.peak,
                    "command": " ".join(["python", *cmd[1:]])}
    if rc != 0:
        result["error"] = f"exit {rc}: " + log.read_text(errors="replace")[-1500:]
    if (run_dir / "metrics.jsonl").is_file():
        result.update(summarize(run_dir / "metrics.jsonl"))
    kind = run_dir.parent / f"{run_dir.name}.distributed"
    if kind.is_file():
        result["distributed_type"] = kind.read_text().strip()
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # a 2B checkpoint is ~11 GB of disk
    return result


def fsdp_entry(record: str, argv: list[str]) -> None:
    """``--fsdp-entry FILE ARGS``: `prover ARGS` in an accelerate-launched process; writes accelerate's
    distributed type to FILE, so the JSON says what really ran (on CPU, see the module docstring)."""
    import torch

    if not torch.cuda.is_available():
        from prover.system.distributed import shard_on_cpu

        shard_on_cpu()
    from accelerate.state import PartialState

    from prover.cli import main

    code = main(argv)
    if PartialState().is_main_process:
        Path(record).write_text(str(PartialState().distributed_type).rsplit(".", 1)[-1])
    sys.exit(code)


def stages(args: argparse.Namespace, work: Path) -> list[tuple[str, list[str], float]]:
    """(name, command, share of the time budget) for each stage; the big model's folder is built between."""
    py, cpu = [sys.executable], int(args.cpu)
    steps = [f"steps={args.steps}"]
    tiny = [*py, "-m", "prover.cli", "train", *COMMON, *SIZES["tiny"][cpu], *steps, f"run.dir={work / 'tiny'}"]
    big = [*COMMON, *SIZES["big"][cpu], *steps, f"model.path={work / 'qwen35_2b_model'}"]
    launch = [*py, "-m", "accelerate.commands.launch", "--config_file",
              str(ROOT / "examples" / "accelerate" / "fsdp.yaml"), "--num_processes", "1",
              "--main_process_port", str(args.port)]
    if args.cpu:  # CPUs: fp32 collectives (gloo); the weights themselves stay bf16 (model.dtype)
        launch += ["--mixed_precision", "no"]
    fsdp = [*launch, str(Path(__file__).resolve()), "--fsdp-entry", str(work / "fsdp_1gpu.distributed"),
            "train", *big, f"run.dir={work / 'fsdp_1gpu'}"]
    return [("tiny", tiny, 0.25), ("qwen35_2b", [*py, "-m", "prover.cli", "train", *big,
                                                 f"run.dir={work / 'qwen35_2b'}"], 0.4), ("fsdp_1gpu", fsdp, 0.35)]


def write(path: Path, report: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(path)


def check(args: argparse.Namespace) -> int:
    import torch

    if not args.cpu and not torch.cuda.is_available():
        sys.exit("device_check: torch sees no GPU here; run with --cpu for the CPU smoke test")
    work = Path(args.work).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    # no user accelerate config; offline, so that nothing waits on a network the GPU machine lacks
    env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HOME=str(work / "hf"), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1")
    if args.cpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    report = {"schema": 1, "mode": "cpu" if args.cpu else "gpu", "versions": versions(),
              "settings": {"steps": args.steps, "budget_s": args.budget_s, "common": COMMON}, "stages": {}}
    t0 = time.perf_counter()
    for name, cmd, share in stages(args, work):
        if name == "qwen35_2b":  # needs the tokenizer of the tiny stage's policy
            bases = sorted((work / "tiny" / "models").glob("base-*"))
            if not bases:
                report["stages"][name] = {"ok": False, "error": "the tiny stage built no policy (no tokenizer)"}
                break
            t1 = time.perf_counter()
            params = build_big_model(bases[0], work / "qwen35_2b_model", QWEN35_TOY if args.cpu else QWEN35_2B)
            report["model"] = {"params": params, "build_s": round(time.perf_counter() - t1, 1),
                               "shape": QWEN35_TOY if args.cpu else QWEN35_2B}
        left = args.budget_s - (time.perf_counter() - t0)
        report["stages"][name] = run_stage(cmd, work / name, max(30.0, min(left, share * args.budget_s * 1.5)), env)
        write(Path(args.out), report)
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    report["ok"] = all(s.get("ok") for s in report["stages"].values()) and len(report["stages"]) == 3
    write(Path(args.out), report)
    print(json.dumps({k: {m: v for m, v in s.items() if m != "error"} for k, s in report["stages"].items()},
                     indent=1))
    return 0 if report["ok"] else 1


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--fsdp-entry":
        fsdp_entry(sys.argv[2], sys.argv[3:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="the JSON file to write")
    ap.add_argument("--cpu", action="store_true", help="toy sizes on CPU: a smoke test of this script")
    ap.add_argument("--work", default="runs/device-check", help="run folders and the built model [runs/device-check]")
    ap.add_argument("--steps", type=int, default=3, help="RL steps per stage [3]")
    ap.add_argument("--budget-s", type=float, default=400, help="seconds for all stages together [400]")
    ap.add_argument("--port", type=int, default=29517, help="accelerate's rendezvous port [29517]")
    args = ap.parse_args()
    if args.steps < 1 or args.budget_s <= 0:
        ap.error("--steps must be at least 1 and --budget-s positive")
    sys.exit(check(args))


if __name__ == "__main__":
    main()

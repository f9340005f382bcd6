"""The learner at the CPU's limit: forward+backward tokens/s of the RL update against the FLOP peaks that large
matrix products reach on the same CPU in the same run.

    python -m benchmarks.perf.learner_limit [--models smollm2,qwen2.5-0.5b-shape] [--precisions fp32,bf16]
        [--lora off,on] [--lengths 512,2048] [--rows 2] [--threads 1,2] [--rounds 2] [--out PATH] [--smoke]

Writes benchmarks/results/perf/learner-limit.json (``--out`` elsewhere).

- Peaks: the best of square matrix products of several sizes (2 n^3 FLOPs each), float32 and bfloat16
  (oneDNN, with AMX where the CPU has it), at each count of --threads, measured again before each round (the
  best of all rounds kept).
- Models: ``smollm2`` is SmolLM2-135M-Instruct from ``prover convert-gguf`` (~/.cache/prover/models);
  ``qwen2.5-0.5b-shape`` is a Qwen2 of Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads, 2 KV heads,
  intermediate 4864, vocabulary 151,936, tied embeddings) with random weights, built here: the work does not
  depend on the weights' values. ``tiny`` (--smoke) is a two-layer Qwen2.
- The update: ``Learner.update`` on --rows synthetic chats of each length in --lengths (one sequence row each,
  a turn of 32 completion and 64 observation tokens per 128, learner.micro_batch_rows as its default forms the
  micro-batches), in fp32 or under ``learner.autocast=bfloat16``, every weight or LoRA rank 16 as the
  real-model job trains. Timed: the learner's own ``_micro_backward`` (the forward with logits_to_keep, the
  PPO loss, the backward), not the optimizer step (its time is in ``update_s``). One short update first warms
  the kernels up and allocates AdamW's moments.
- FLOPs (benchmarks/perf/flops.py's ModelShape: 2 per weight of the decoder's matrices per token, the LM head
  at the kept positions only, 4 x heads x head_dim per layer per causal (query, key) pair). ``flops_3x``: the
  usual training convention, 3 x the forward. ``flops``, the work the update needs, against which
  achieved/peak is taken: every weight, 3 x the forward (the backward computes input and weight gradients);
  LoRA, 2 x the forward for the frozen matrices (input gradients only), 3 x for attention's products and for
  the adapters' own. Checkpointing's recomputed forward is not counted: it is extra work, not the update's.
- Cases: every model x precision x LoRA x length at the first thread count; at each other count, every model
  x precision with LoRA at the first length (threads); and with ``learner.gradient_checkpointing`` on, every
  model x precision with LoRA at the last length (its peak memory and time against the same case off).
- Each case runs in a child process (peak resident memory, VmHWM, is per process); --rounds rounds
  over all cases in turn, the fastest round of each case kept (the machine is shared). The load average is
  saved per run. --smoke: the tiny model, one 48-token length, in this process, in seconds (checks the code).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.perf.bandwidth import cpu
from benchmarks.perf.flops import ModelShape
from benchmarks.perf.learner_sequences import SMOLLM2, chats
from benchmarks.perf.results import RESULTS, stamp

OUT = RESULTS / "learner-limit.json"  # named in results.OTHER_PERF
SHAPES = {  # random-weight models built here: transformers config fields
    "qwen2.5-0.5b-shape": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                               intermediate_size=4864, vocab_size=151936, max_position_embeddings=32768,
                               rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, vocab_size=512, max_position_embeddings=512, tie_word_embeddings=True)}
LORA_RANK, LORA_ALPHA = 16, 32.0  # the real-model job's adapters
PEAK_SIZES, SMOKE_SIZES = (1024, 2048, 3072), (64,)
TURN_TOKENS = 128  # a turn's completion + observation in the synthetic chats
GB = 2**30


def chat_shape(length: int) -> dict:
    """The chats' settings for sequence rows of ``length`` tokens: a turn per 128 tokens, each a completion of
    32 and an observation of 64 (less where the row is short), the rest the first prompt."""
    turns = max(1, length // TURN_TOKENS)
    completion = min(32, length // (4 * turns))
    observation = 2 * completion
    first = length - turns * completion - (turns - 1) * observation
    return dict(turns=turns, first=first, observation=observation, completion=completion)


def matmul_peaks(threads: list[int], sizes: tuple[int, ...], rounds: int) -> dict:
    """GFLOP/s of the best square ``a @ b`` over ``sizes`` and ``rounds``, by precision and thread count."""
    import torch

    previous, out = torch.get_num_threads(), {}
    try:
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            out[name] = {}
            for n in threads:
                torch.set_num_threads(n)
                best = 0.0
                for size in sizes:
                    a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
                    a @ b  # oneDNN builds its kernel on the first call
                    for _ in range(rounds):
                        t0 = time.perf_counter()
                        a @ b
                        best = max(best, 2 * size**3 / (time.perf_counter() - t0) / 1e9)
                out[name][str(n)] = round(best, 1)
    finally:
        torch.set_num_threads(previous)
    return out


def flops(config, length: int, rows: int, lora: bool) -> dict:
    """The update's FLOPs on ``rows`` sequence rows of ``length`` tokens (see the module's docstring)."""
    shape, chat = ModelShape.of(config), chat_shape(length)
    kept = chat["turns"] * chat["completion"]  # the positions that go through the LM head
    pairs = length * (length + 1) / 2
    forward = {"matrices": length * shape.body + kept * shape.head, "attention": pairs * shape.pair}
    d, layers, inter = config.hidden_size, config.num_hidden_layers, config.intermediate_size
    hd = getattr(config, "head_dim", None) or d // config.num_attention_heads
    q, kv = config.num_attention_heads * hd, config.num_key_value_heads * hd
    sides = (d + q) * 2 + (d + kv) * 2 + (d + inter) * 3  # in + out of q, o; k, v; gate, up, down
    adapters = 2.0 * LORA_RANK * layers * sides * length if lora else 0.0
    needed = forward["matrices"] * (2 if lora else 3) + forward["attention"] * 3 + adapters * 3
    return {"flops": rows * needed, "flops_3x": rows * 3 * (forward["matrices"] + forward["attention"])}


def peak_rss_gb() -> float:
    """This process's peak resident memory: VmHWM, which starts afresh at exec (``ru_maxrss`` keeps the
    parent's peak across fork and exec, so a child of a parent that built a 2 GB model would read 2 GB)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024 / GB
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GB  # kB on Linux; not Linux: bytes


def run_case(case: dict, folder: str, rows: int) -> dict:
    """One case in this process: the learner, a warm-up update, then the timed one."""
    import torch

    from prover.config import LearnerConfig, LoraConfig
    from prover.learning.learner import Learner
    from prover.learning.model_folder import model_setting

    torch.set_num_threads(case["threads"])
    torch.manual_seed(0)
    length, vocab = case["length"], model_setting(folder, "vocab_size")
    cfg = LearnerConfig(autocast="bfloat16" if case["precision"] == "bf16" else "off", mini_batch_rows=4096,
                        gradient_checkpointing=case["checkpointing"])
    learner = Learner(folder, cfg, max_completion_tokens=chat_shape(length)["completion"],
                      lora=LoraConfig(enabled=True, rank=LORA_RANK, alpha=LORA_ALPHA) if case["lora"] else None)
    loaded_gb = peak_rss_gb()
    learner.update(*chats(episodes=1, turns=1, first=8, observation=0, completion=8, vocab=vocab, seed=1))
    spent, inner = [], learner._micro_backward

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        out = inner(*args, **kwargs)
        spent.append(time.perf_counter() - t0)
        return out

    learner._micro_backward = timed
    batch, adv = chats(episodes=rows, vocab=vocab, **chat_shape(length))
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    stats = learner.update(batch, adv)
    update_s = time.perf_counter() - t0
    return {"fwd_bwd_s": sum(spent), "update_s": update_s, "micro_batches": len(spent),
            "tokens": stats["learner/forwarded_tokens"], "loaded_gb": round(loaded_gb, 2),
            "peak_gb": round(peak_rss_gb(), 2), "load_1m": [load, os.getloadavg()[0]]}


def run_child(case: dict, folder: str, rows: int) -> dict:
    """``run_case`` in a fresh process with ``case["threads"]`` OpenMP threads."""
    env = {**os.environ, "OMP_NUM_THREADS": str(case["threads"]), "MKL_NUM_THREADS": str(case["threads"])}
    argv = [sys.executable, "-m", "benchmarks.perf.learner_limit", "--child", json.dumps(case), "--folder", folder,
            "--rows", str(rows)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=3600, env=env)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def model_folder(name: str, tmp: Path) -> Path:
    """The folder of model ``name``: SmolLM2's converted one, or a random-weight model of a SHAPES entry saved
    under ``tmp`` with a small tokenizer (the learner reads the pad id from it; the token ids are random)."""
    if name == "smollm2":
        return SMOLLM2
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from prover.learning.modeling import quiet_transformers
    from prover.policy.tiny import train_tokenizer

    quiet_transformers()
    tokenizer = train_tokenizer(iter(["the learner at its limit"] * 4), vocab_size=300)
    config = Qwen2Config(**SHAPES[name], pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    folder = tmp / name
    Qwen2ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def plan(models: list[str], precisions: list[str], loras: list[bool], lengths: list[int],
         threads: list[int]) -> list[dict]:
    """The cases (see the module's docstring): the grid, the other thread counts, checkpointing on."""
    def case(model, precision, lora, length, n=threads[0], checkpointing=False, part="grid") -> dict:
        return dict(model=model, precision=precision, lora=lora, length=length, threads=n,
                    checkpointing=checkpointing, part=part)

    grid = [case(m, p, lo, n) for m in models for p in precisions for lo in loras for n in lengths]
    more = [case(m, p, True, lengths[0], n, part="threads") for n in threads[1:] for m in models for p in precisions]
    more += [case(m, p, True, lengths[-1], checkpointing=True, part="checkpointing")
             for m in models for p in precisions]
    return grid + more


def measure(cases: list[dict], folders: dict, rows: int, rounds: int, in_process: bool, peaks, save) -> list[dict]:
    """Every case, ``rounds`` times in turn, ``peaks(round)`` measured before each round and ``save`` called
    with the cases so far after it (a long run cut short keeps its finished rounds); the fastest round of each
    case kept beside every round's seconds."""
    runs: list[list[dict]] = [[] for _ in cases]
    for r in range(rounds):
        peaks(r)
        for case, got in zip(cases, runs):
            folder = str(folders[case["model"]])
            got.append(run_case(case, folder, rows) if in_process else run_child(case, folder, rows))
            print(f"round {r + 1}: {label(case)}: " + (got[-1].get("error") or
                  f"{got[-1]['fwd_bwd_s']:.2f} s, load {got[-1]['load_1m'][0]:.2f}"), flush=True)
        save(best_rounds(cases, runs, folders, rows))
    return best_rounds(cases, runs, folders, rows)


def best_rounds(cases: list[dict], runs: list[list[dict]], folders: dict, rows: int) -> list[dict]:
    """Each case with its fastest round, its FLOPs and every round's seconds (or its last error)."""
    from transformers import AutoConfig

    out = []
    for case, got in zip(cases, runs):
        ok = [g for g in got if "error" not in g]
        if not ok:
            out.append({**case, "error": got[-1]["error"] if got else "not run"})
            continue
        best = min(ok, key=lambda g: g["fwd_bwd_s"])
        config = AutoConfig.from_pretrained(folders[case["model"]])
        out.append({**case, **best, **flops(config, case["length"], rows, case["lora"]),
                    "rounds_s": [round(g["fwd_bwd_s"], 3) for g in ok]})
    return out


def label(case: dict) -> str:
    return (f"{case['model']} {case['precision']} {'lora' if case['lora'] else 'full'} {case['length']} tokens "
            f"{case['threads']} thread(s){' checkpointing' if case['checkpointing'] else ''}")


def rates(result: dict) -> None:
    """Tokens/s and achieved/peak of each case, in place, against the peak of its precision and thread count."""
    for case in result["cases"]:
        if "error" in case:
            continue
        peak = result["peaks_gflops"][case["precision"]][str(case["threads"])]
        case["tokens_per_s"] = round(case["tokens"] / case["fwd_bwd_s"], 1)
        case["gflops"] = round(case["flops"] / case["fwd_bwd_s"] / 1e9, 1)
        case["achieved_over_peak"] = round(case["gflops"] / peak, 3)


def table(result: dict) -> list[str]:
    lines = [f"{result['cpu']['model']} {result['cpu']['family_model_stepping']} "
             f"({result['cpu']['torch_cpu_capability']}), load {result['load']['start'][0]:.2f} -> "
             f"{result['load']['end'][0]:.2f}; peaks GFLOP/s {result['peaks_gflops']}"]
    for c in result["cases"]:
        lines.append(f"  {label(c):<62}" + (c.get("error") or (
            f"{c['tokens_per_s']:8.1f} tok/s {c['gflops']:7.1f} GFLOP/s {c['achieved_over_peak']:6.1%} of peak "
            f"peak {c['peak_gb']:5.2f} GB (loaded {c['loaded_gb']:.2f})")))
    return lines


def listed(text: str, allowed: set | None = None, number: bool = False) -> list:
    """A comma-separated option as a list; a one-line exit on an unknown or bad entry."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if (number and not (x.isdigit() and int(x) >= 1)) or (allowed and x not in allowed)]
    if not items or bad:
        raise SystemExit(f"learner_limit: {text!r}: want {'counts of at least 1' if number else sorted(allowed)}")
    return [int(x) for x in items] if number else items


def check_inputs(args: argparse.Namespace, models: list[str], lengths: list[int]) -> None:
    """One line and no measuring where a model folder is missing, a row too short, or --out unwritable."""
    if "smollm2" in models and not SMOLLM2.is_dir():
        raise SystemExit(f"learner_limit: no model folder {SMOLLM2}; run `prover convert-gguf` first")
    if min(lengths) < 16 or args.rows < 1 or args.rounds < 1:
        raise SystemExit("learner_limit: --lengths at least 16 tokens, --rows and --rounds at least 1")
    if args.out.is_dir():
        raise SystemExit(f"learner_limit: --out {args.out} is a folder; name a file")
    blocking = next((p for p in args.out.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise SystemExit(f"learner_limit: --out {args.out} is under {blocking}, a file")
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=args.out.parent):
            pass
    except OSError as e:
        raise SystemExit(f"learner_limit: cannot write --out {args.out} ({e.strerror or e})") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="smollm2,qwen2.5-0.5b-shape")
    ap.add_argument("--precisions", default="fp32,bf16", help="fp32, bf16 (learner.autocast=bfloat16)")
    ap.add_argument("--lora", default="off,on", help="off (every weight trains), on (LoRA rank 16)")
    ap.add_argument("--lengths", default="512,2048", help="tokens per sequence row (a chat trajectory)")
    ap.add_argument("--rows", type=int, default=2, help="chats in the update (sequence rows)")
    ap.add_argument("--threads", default="1,2", help="torch threads: the grid at the first, the rest for LoRA")
    ap.add_argument("--rounds", type=int, default=2, help="rounds over all cases (the fastest kept)")
    ap.add_argument("--out", type=Path, default=OUT, help=f"where the JSON goes (default {OUT})")
    ap.add_argument("--smoke", action="store_true", help="the tiny model, 48 tokens, in this process")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(run_case(json.loads(args.child), args.folder, args.rows)))
        return 0
    if args.smoke:
        args.models, args.lengths, args.rows, args.threads, args.rounds = "tiny", "48", 1, "1", 1
    models = listed(args.models, {"smollm2", *SHAPES})
    lengths, threads = listed(args.lengths, number=True), listed(args.threads, number=True)
    precisions, loras = listed(args.precisions, {"fp32", "bf16"}), listed(args.lora, {"off", "on"})
    check_inputs(args, models, lengths)
    load, t0 = {"start": list(os.getloadavg())}, time.perf_counter()
    peaks: dict = {}

    def measure_peaks(round_index: int) -> None:
        """The matmul peaks again before each round, the best of all kept: the load varies between rounds."""
        got = matmul_peaks(threads, SMOKE_SIZES if args.smoke else PEAK_SIZES, 1 if args.smoke else 3)
        for name, by_threads in got.items():
            for n, gflops in by_threads.items():
                peaks.setdefault(name, {})[n] = max(gflops, peaks.get(name, {}).get(n, 0.0))
        print(f"round {round_index + 1}: peaks GFLOP/s {got}", flush=True)

    cases = plan(models, precisions, [x == "on" for x in loras], lengths, threads)
    import torch

    result = {"cpu": cpu(), "torch": torch.__version__, "smoke": args.smoke, "load": load, "peaks_gflops": peaks,
              "settings": {"rows": args.rows, "rounds": args.rounds, "threads": threads, "lora_rank": LORA_RANK,
                           "chat_shapes": {str(n): chat_shape(n) for n in lengths}},
              "command": " ".join(["python -m benchmarks.perf.learner_limit", *(argv or sys.argv[1:])])}

    def save(measured: list[dict]) -> None:
        load["end"] = list(os.getloadavg())
        result.update(cases=measured, measured=stamp(time.perf_counter() - t0))
        rates(result)
        args.out.write_text(json.dumps(result, indent=1) + "\n")

    with tempfile.TemporaryDirectory() as tmp:
        folders = {m: model_folder(m, Path(tmp)) for m in models}
        save(measure(cases, folders, args.rows, args.rounds, args.smoke, measure_peaks, save))
    print("\n".join(table(result)), flush=True)
    print(f"wrote {args.out}")
    return 0 if all("error" not in c for c in result["cases"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())

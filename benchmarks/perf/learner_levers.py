"""What the levers of the learner's update are worth on this CPU: variants side by side in one process, by CPU
seconds.

    python -m benchmarks.perf.learner_levers [--model smollm2] [--chats 4] [--rounds 3] [--out PATH] [--smoke]

Writes benchmarks/results/perf/learner-levers.json (``--out`` elsewhere).

- The update: ``Learner.update`` with LoRA rank 16 under ``learner.autocast=bfloat16`` (the real-model job's
  learner, ``learner.micro_batch_rows=4`` as the step benchmark sets it) on --chats synthetic chats shaped like
  an alfworld-sim episode of SmolLM2 in the chat context: a first prompt of 163 tokens, then 15 turns of a
  20-token completion each, 56 observation tokens between them (1,247 tokens; each chat one sequence row and
  one micro-batch, as in the real step). Each variant has its own Learner; the variants run in turn,
  round after round, and each update is timed by this process's CPU seconds (``time.process_time``: the
  machine is shared, so wall time says more about the neighbours than about the code). The optimizer step is
  skipped, so every round does the same work on the same weights.
- Variants: ``autocast`` (``learner.frozen_bf16=false``: autocast casts every frozen weight at every forward
  pass, so once per chat); ``frozen_bf16`` (the default: each cast once per update); ``no_attention``
  (``frozen_bf16`` with the attention replaced by a stand-in that returns its queries: wrong outputs at no
  cost, so the difference to ``frozen_bf16`` is what attention costs the update).
- ``frozen_cast_ms``: the CPU milliseconds of casting those frozen weights to bfloat16 once, which is what
  ``frozen_bf16`` takes off each micro-batch's forward pass but the first of an update.
- ``sdpa``: torch's ``scaled_dot_product_attention`` alone, forward and backward at the model's heads and the
  chat's length, causal, flash and math backends, float32 and bfloat16, CPU milliseconds (the best of --rounds).
- ``--smoke``: a two-layer random model, a short chat, one round, in seconds (checks the code).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.perf.bandwidth import cpu
from benchmarks.perf.learner_limit import LORA_ALPHA, LORA_RANK, SHAPES, model_folder
from benchmarks.perf.learner_sequences import chats
from benchmarks.perf.results import RESULTS, stamp

OUT = RESULTS / "learner-levers.json"  # named in results.OTHER_PERF
CHAT = dict(first=163, turns=15, completion=20, observation=56)  # alfworld-sim, SmolLM2, chat context
SMOKE_CHAT = dict(first=24, turns=3, completion=4, observation=6)
VARIANTS = ("autocast", "frozen_bf16", "no_attention")
NO_ATTENTION = "prover_bench_no_attention"


def no_attention(module, query, key, value, attention_mask, **kwargs):
    """An attention stand-in: the queries as the output, (batch, length, heads, dim) as attention returns it."""
    return query.transpose(1, 2).contiguous(), None


def learner(folder: Path, variant: str):
    import torch
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    from prover.config import LearnerConfig, LoraConfig
    from prover.learning.learner import Learner

    torch.manual_seed(0)
    cfg = LearnerConfig(autocast="bfloat16", frozen_bf16=variant != "autocast", mini_batch_rows=4096,
                        micro_batch_rows=4)
    trained = Learner(folder, cfg, max_completion_tokens=32, lora=LoraConfig(enabled=True, rank=LORA_RANK,
                                                                              alpha=LORA_ALPHA))
    if variant == "no_attention":
        AttentionInterface.register(NO_ATTENTION, no_attention)
        AttentionMaskInterface.register(NO_ATTENTION, sdpa_mask)
        trained.unwrapped().get_base_model().set_attn_implementation(NO_ATTENTION)
    trained.optimizer.step = lambda *args, **kwargs: None  # the same weights, so the same work, every round
    return trained


def updates(folder: Path, chat: dict, n_chats: int, rounds: int) -> dict:
    """Each variant's update CPU seconds, round by round, the variants in turn."""
    from prover.learning.model_folder import model_setting

    batch, adv = chats(episodes=n_chats, vocab=model_setting(folder, "vocab_size"), **chat)
    learners = {v: learner(folder, v) for v in VARIANTS}
    for trained in learners.values():  # kernels built, buffers allocated
        trained.update(batch, adv)
    seconds: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for r in range(rounds):
        for variant, trained in learners.items():
            t0 = time.process_time()
            stats = trained.update(batch, adv)
            seconds[variant].append(time.process_time() - t0)
            print(f"round {r + 1}: {variant:<13} {seconds[variant][-1]:6.2f} CPU s, "
                  f"loss {stats['learner/pg_loss']:.6f}, load {os.getloadavg()[0]:.1f}", flush=True)
    return {v: {"rounds_s": [round(s, 3) for s in got], "best_s": min(got), "median_s": statistics.median(got)}
            for v, got in seconds.items()}


def frozen_cast_ms(folder: Path, rounds: int) -> float:
    """CPU milliseconds to cast every weight ``learner.frozen_bf16`` keeps a copy of (the linear layers LoRA
    freezes and the LM head) to bfloat16: what autocast does at each micro-batch's forward without the copies
    (the best of ``rounds``)."""
    import torch

    trained = learner(folder, "autocast")
    frozen = [m.weight for m in trained.unwrapped().modules()
              if type(m) is torch.nn.Linear and not m.weight.requires_grad]
    best = float("inf")
    for _ in range(rounds + 1):
        t0 = time.process_time()
        copies = [w.detach().to(torch.bfloat16) for w in frozen]
        best = min(best, time.process_time() - t0)
        del copies
    return round(best * 1e3, 1)


def sdpa(folder: Path, length: int, rounds: int) -> list[dict]:
    """Forward and backward CPU milliseconds of causal SDPA at the model's heads and ``length`` tokens."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from transformers import AutoConfig

    conf = AutoConfig.from_pretrained(folder)
    heads, kv = conf.num_attention_heads, conf.num_key_value_heads
    dim = getattr(conf, "head_dim", None) or conf.hidden_size // heads
    out = []
    for dtype in (torch.float32, torch.bfloat16):
        for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.MATH):
            torch.manual_seed(0)
            q, k, v = (torch.randn(1, n, length, dim, dtype=dtype, requires_grad=True) for n in (heads, kv, kv))
            grad = torch.randn(1, heads, length, dim, dtype=dtype)
            forward, total = [], []
            for _ in range(rounds + 1):  # the first builds the kernels
                t0 = time.process_time()
                with sdpa_kernel(backend):
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv != heads)
                t1 = time.process_time()
                o.backward(grad)
                forward.append(t1 - t0)
                total.append(time.process_time() - t0)
            out.append({"dtype": str(dtype).removeprefix("torch."), "backend": backend.name.lower(),
                        "forward_ms": round(min(forward[1:]) * 1e3, 2),
                        "forward_backward_ms": round(min(total[1:]) * 1e3, 2)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2", choices=["smollm2", *SHAPES])
    ap.add_argument("--chats", type=int, default=4, help="chats in the update, one micro-batch each")
    ap.add_argument("--rounds", type=int, default=3, help="rounds over the variants (CPU seconds of each kept)")
    ap.add_argument("--out", type=Path, default=OUT, help=f"where the JSON goes (default {OUT})")
    ap.add_argument("--smoke", action="store_true", help="the tiny model, a short chat, one round")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.chats < 1:
        raise SystemExit("learner_levers: --rounds and --chats must be at least 1")
    if args.out.is_dir() or not args.out.parent.is_dir():
        raise SystemExit(f"learner_levers: --out {args.out}: name a file in a folder that exists")
    model, chat, rounds, n_chats = ("tiny", SMOKE_CHAT, 1, 2) if args.smoke else (args.model, CHAT, args.rounds,
                                                                                  args.chats)
    import torch

    torch.set_num_threads(1)
    load, t0 = {"start": list(os.getloadavg())}, time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = model_folder(model, Path(tmp))
        if not folder.is_dir():
            raise SystemExit(f"learner_levers: no model folder {folder}; run `prover convert-gguf` first")
        variants = updates(folder, chat, n_chats, rounds)
        length = chat["first"] + chat["turns"] * chat["completion"] + (chat["turns"] - 1) * chat["observation"]
        attention = sdpa(folder, length, rounds)
        cast_ms = frozen_cast_ms(folder, rounds)
    load["end"] = list(os.getloadavg())
    best = {v: got["best_s"] for v, got in variants.items()}
    result = {"cpu": cpu(), "torch": torch.__version__, "smoke": args.smoke, "model": model, "threads": 1,
              "chat": {**chat, "tokens": length}, "chats": n_chats, "load": load, "variants": variants,
              "sdpa": attention,
              "frozen_cast_ms": cast_ms,
              "ratios": {"autocast_over_frozen_bf16": best["autocast"] / best["frozen_bf16"],
                         "attention_share": 1 - best["no_attention"] / best["frozen_bf16"]},
              "command": " ".join(["python -m benchmarks.perf.learner_levers", *(argv or sys.argv[1:])]),
              "measured": stamp(time.perf_counter() - t0)}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["ratios"]), json.dumps(attention), f"wrote {args.out}", sep="\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The ``hf`` engine's decode loop with rows that stop at different times: stopped rows left out of each step
(the default) against fed pads until the last row stops, as ``model.generate`` does.

    python -m benchmarks.perf.stopped_rows [--model DIR] [--rows 16] [--context 1500] [--lengths 8:64]
        [--dtypes float32,bfloat16] [--rounds 3] [--threads 1] [--out PATH] [--smoke]

A batch of ``--rows`` chats, each ``--context`` random tokens already in the KV cache (prefilled once, not
timed), decodes one turn; row i stops after the i-th of ``--rows`` lengths spread evenly over ``--lengths``
(a logits processor forces the stop token there and bans it before), so both sides generate the same number
of tokens a row. Each side's time is the best of ``--rounds`` CPU-second measurements of this process, the two
sides interleaved. ``row-step share`` is the generated tokens over rows x the longest row's steps: the share of
the fed-pads side's row-steps that produce a token.

Writes benchmarks/results/perf/stopped-rows-<isa>.json (``--out`` elsewhere) with the CPU and the load average.
``--smoke``: the tiny policy, 4 rows, a few tokens (checks the code, not the machine).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from benchmarks.perf.results import RESULTS


class ForcedLengths:
    """A logits processor: row i may not stop before ``lengths[i]`` new tokens and must stop there."""

    def __init__(self, start: int, lengths: list[int], stop: int) -> None:
        self.start, self.lengths, self.stop = start, lengths, stop

    def __call__(self, input_ids, scores):
        import torch

        made = input_ids.shape[1] - self.start
        for i, length in enumerate(self.lengths):
            if made + 1 >= length:
                scores[i] = -torch.inf
                scores[i, self.stop] = 0.0
            else:
                scores[i, self.stop] = -torch.inf
        return scores


def spread(rows: int, low: int, high: int) -> list[int]:
    return [round(low + (high - low) * i / max(rows - 1, 1)) for i in range(rows)]


def side_seconds(engine, ids, cache, lengths: list[int], drop: bool) -> float:
    """One turn's decode from the prefilled cache, CPU seconds."""
    import torch

    from prover.engines.decode import decode
    from prover.types import SamplingParams

    used = ids.shape[1] - 1
    for layer in cache.layers:  # forget the last turn's columns: the next writes over them
        layer.keys, layer.values = layer.key_buffer[:, :, :used], layer.value_buffer[:, :, :used]
    stop = engine.stop_ids[0]
    params = SamplingParams(max_new_tokens=max(lengths), temperature=1.0)
    torch.manual_seed(0)
    t0 = time.process_time()
    done = decode(engine.model, ids, torch.ones_like(ids), cache, engine.cache_kwarg, params, [stop],
                  engine.pad_id, [ForcedLengths(ids.shape[1], lengths, stop)], engine.fused_step, drop_stopped=drop)
    seconds = time.process_time() - t0
    made = [row.tolist().index(stop) + 1 if stop in row.tolist() else len(row) for row in done.tokens]
    if made != lengths:
        raise RuntimeError(f"rows made {made} tokens, not {lengths}")
    return seconds


def measure_dtype(model: str, dtype: str, args: argparse.Namespace) -> dict:
    import torch

    from prover.engines.decode import empty_reserved_cache
    from prover.engines.hf import HFEngine

    engine = HFEngine(model, dtype=dtype, prefix_cache_mb=0)
    lengths = spread(args.rows, *args.lengths)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(100, engine.model.config.vocab_size - 1, (args.rows, args.context), generator=gen)
    cache = empty_reserved_cache(engine.model.config.num_hidden_layers, args.context + max(lengths) - 1)
    with torch.inference_mode():
        engine.model(input_ids=ids[:, :-1], use_cache=True, **{engine.cache_kwarg: cache})
    times: dict[str, list[float]] = {"dropped": [], "fed": []}
    for _ in range(args.rounds + 1):  # the first round warms up and is not kept
        for side in times:
            times[side].append(side_seconds(engine, ids, cache, lengths, side == "dropped"))
    best = {side: min(v[1:]) for side, v in times.items()}
    share = sum(lengths) / (args.rows * max(lengths))
    print(f"[stopped rows] {dtype}: dropped {best['dropped']:.2f} s, fed {best['fed']:.2f} s, "
          f"fed / dropped {best['fed'] / best['dropped']:.2f}x (row-step share {share:.2f})", flush=True)
    return {"lengths": lengths, "seconds": times, "best": best, "ratio_fed_over_dropped": best["fed"] / best["dropped"],
            "row_step_share": share}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="SmolLM2's HF folder (default: prover convert-gguf's)")
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--context", type=int, default=1500)
    ap.add_argument("--lengths", default="8:64", help="LOW:HIGH, the rows' new tokens spread evenly between")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out")
    ap.add_argument("--smoke", action="store_true", help="the tiny policy, 4 rows, a few tokens")
    args = ap.parse_args(argv)
    args.lengths = [int(v) for v in args.lengths.split(":")]
    if len(args.lengths) != 2 or not 1 <= args.lengths[0] <= args.lengths[1]:
        ap.error("--lengths takes LOW:HIGH with 1 <= LOW <= HIGH")
    import torch

    from benchmarks.perf.bandwidth import cpu
    from prover.engines import decode_kernels as kernels

    torch.set_num_threads(args.threads)
    if args.smoke:
        args.model, args.rows, args.context, args.lengths, args.rounds = smoke_model(), 4, 12, [2, 5], 1
        args.dtypes = "float32"
    elif args.model is None:
        from prover.judges.gguf_convert import convert

        args.model = str(convert()[0])
    library = kernels.load()[0]
    isa = kernels.ISA_NAMES[library.prover_gemv_isa()] if library else "torch"
    start = {"measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_start": os.getloadavg()}
    dtypes = {dtype: measure_dtype(args.model, dtype, args) for dtype in args.dtypes.split(",")}
    res = {"model": args.model, "rows": args.rows, "context": args.context, "threads": args.threads,
           "gemv_isa": isa, "cpu_info": cpu(), **start, "load_end": os.getloadavg(), "dtypes": dtypes}
    out = Path(args.out or (Path(tempfile.mkdtemp()) / "stopped-rows.json" if args.smoke
                            else RESULTS / f"stopped-rows-{isa.lower().replace('-', '')}.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")


def smoke_model() -> str:
    from prover.envs import make_env
    from prover.policy.tiny import build_tiny_policy

    work = Path(tempfile.mkdtemp())
    return str(build_tiny_policy(lambda: make_env("alfworld-sim"), work / "tiny", vocab_size=400, corpus_episodes=20))


if __name__ == "__main__":
    main()

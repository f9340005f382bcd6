"""docs/perf.md's section on decoding against the machine's limits: the memory bandwidth a thread gets
(benchmarks/perf/bandwidth.py), prover's decode against llama.cpp on the same weights, precision, batch,
threads and tokens (decode_vs_llama.py), the engine's kernels against torch's by rows of input (kernel_rows.py),
and a real model's RL step against an earlier revision
(step_ratio.py), each with the CPU it ran on."""

from __future__ import annotations

TITLE = "## Decoding against the memory limit"
OFF = "prover, transformers forward"  # decode_vs_llama's side with the engine's decode levers off
FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
AVX2 = ", on a CPU without AVX-512"  # the second CPU's tables (bandwidth-avx2.json, decode-vs-llama-avx2.json)
NO_AMX = ", on a CPU with AVX512-BF16 and no AMX"  # a third CPU's (step-ratio-<case>-noamx.json, decode-vs-llama-noamx)
STEP_CASES = {"alfworld": "SmolLM2-135M-Instruct (Q4_1, dequantized) on alfworld-sim",
              "pivot2": "Qwen2.5-Coder-0.5B-Instruct (AWQ, Q4_K_M, dequantized) on two-rack pivot-sim"}


def cpu_line(cpu: dict) -> str:
    flags = ", ".join(f"{f} {'yes' if cpu.get('flags', {}).get(f) else 'no'}" for f in FLAGS)
    return (f"CPU: {cpu.get('model', '?')} (family/model/stepping {cpu.get('family_model_stepping', '?')}, "
            f"{cpu.get('cpus', '?')} cores; {flags}; torch's kernels {cpu.get('torch_cpu_capability', '?')}).")


def bandwidth_lines(res: dict, where: str = "") -> list[str]:
    stream, weights = res["stream"]["gb_per_s"], res["weights"]
    threads = sorted(stream["copy"], key=int)
    load = res.get("load", {})
    lines = ["", f"### The ceiling: memory bandwidth{where}", "",
             f"`python -m benchmarks.perf.bandwidth` ({res['settings']['array_mib']} MiB arrays, best of "
             f"{res['settings']['rounds']} rounds; load average {load.get('start', ['?'])[0]:.1f} at the start). "
             "A batch-1 decode step reads every weight once and does two FLOPs per weight: it is bound by how fast "
             "one thread streams memory, not by the FLOP peak (the limit below).", "",
             "| GB/s | " + " | ".join(f"{t} thread{'s' if t != '1' else ''}" for t in threads) + " |",
             "|---|" + "---|" * len(threads)]
    for kernel in ("copy", "triad", "read"):
        lines.append(f"| STREAM {kernel} | " + " | ".join(f"{stream[kernel][t]:.1f}" for t in threads) + " |")
    for dtype in ("fp32", "bf16"):
        rates = weights[dtype]["gb_per_s"]
        lines.append(f"| batch-1 `F.linear`, {dtype} weights (GB of weights read) | "
                     + " | ".join(f"{rates[t]:.1f}" for t in threads) + " |")
    for dtype in ("fp32", "bf16"):
        kernel = weights[dtype].get("engine_kernel_gb_per_s")
        if kernel:
            lines.append(f"| batch-1 product by the engine's kernel (`prover.engines.decode_kernels`), {dtype} "
                         f"weights | {kernel:.1f} |" + " - |" * (len(threads) - 1))
    for dtype, model in (res.get("model") or {}).items():
        for side, label in (("torch", "each matrix in torch's memory"), ("arena", "all in one huge-page arena")):
            lines.append(f"| the engine's kernel over SmolLM2-135M's matrices in use order, {dtype}, {label} | "
                         f"{model['gb_per_s'][side]:.1f} |" + " - |" * (len(threads) - 1))
    lines += ["", second_thread(stream["read"]) + " " + cpu_line(res["cpu"])]
    return lines


def second_thread(read: dict) -> str:
    """What a second thread adds to the read bandwidth, as measured (it depends on what else the machine runs)."""
    if "1" not in read or "2" not in read:
        return ""
    gain = read["2"] / read["1"]
    if gain < 1.15:
        return (f"A second thread adds little ({gain:.2f}x the read bandwidth): one thread takes most of what the "
                "machine's memory gives this VM at that load.")
    return (f"A second thread adds bandwidth ({gain:.2f}x the read rate of one) when the other core is idle; the "
            "engine's kernels use one thread, so a decode step on an idle 2-core machine could stream faster "
            "than the one-thread figures below.")


def one_thread_read(bandwidth: dict) -> float:
    """The fastest one thread was measured reading memory: STREAM's read (a sum) or a batch-1 ``F.linear``'s
    weights (on an AVX2 EPYC torch's one-thread sum reads slower than its matrix-vector product does)."""
    weights = bandwidth["weights"]
    return max([bandwidth["stream"]["gb_per_s"]["read"]["1"],
                *(weights[d]["gb_per_s"]["1"] for d in ("fp32", "bf16") if d in weights)])


def llama_build(res: dict) -> str:
    """The instruction sets the llama.cpp build was compiled with (its ``ggml_cpu_has_*``)."""
    features = res.get("llama_cpu_features")
    if not features:  # a run that did not record them: the Xeon's build, as it was configured
        return "built with AVX-512 (BF16, VNNI, VBMI) and without AMX"
    return "built for this CPU (`GGML_NATIVE`): " + ", ".join(f.upper() for f in features)


def decode_reading(res: dict) -> str:
    """What the table says, by the instruction sets of the CPU it ran on."""
    emulated = "cpu_info" in res and not res["cpu_info"].get("flags", {}).get("avx512_bf16")
    reading = ("Reading: at batch 1 a step reads every weight once, so its ceiling is the bandwidth above. The fused "
               "step (`prover.engines.fused_step`) runs a layer as four products (stacked query-key-value, output, "
               "stacked gate-up, down) and a few C calls (norm with the residual add, rotation with the cache "
               "write, attention) instead of some thirty torch operations dispatched from Python; the small-batch "
               f"kernels read {'float32 ' if emulated else ''}weights at close to the bandwidth (the kernel's rows in "
               "the table above).")
    if res.get("weight_arena"):
        reading += (" The weights a step reads lie in one buffer in the order it reads them, on huge pages "
                    "(`prover.engines.weight_arena`; the bandwidth table's SmolLM2 rows compare the two layouts).")
    if emulated:
        return (reading + " This table was measured with the loop over layers in one C call as well (where the "
                "kernels take every product, `decode_step.c`), which removed about a dozen Python-side calls a "
                "layer. Without bfloat16 instructions the engine's kernel widens bfloat16 weights to float32 in "
                "registers (half the bytes to read, at about four fifths of the float32 byte rate) up to the rows "
                "`MAX_ROWS` allows; past it torch's products convert bfloat16 in software.")
    flags = res.get("cpu_info", {}).get("flags", {})
    if "cpu_info" in res and not flags.get("amx_bf16"):
        return (reading + " Without AMX, oneDNN has no tiles for bfloat16 either, and the kernels take bfloat16 "
                "steps up to 16 rows (`NO_AMX_BF16_ROWS`). At one or two rows a product reads its matrix as one "
                "sequential stream, without software prefetches, which the hardware prefetcher follows best.")
    return (reading + " At batch 8 and 16 a bfloat16 step is bound by arithmetic, and torch's products (oneDNN, "
            "AMX) take over from the kernels there.")


def decode_lines(res: dict, bandwidth: dict | None, where: str = "") -> list[str]:
    best, wb = res["best"], res.get("weight_bytes", {})
    lines = ["", f"### Decode against llama.cpp, matched{where}", "",
             f"`python -m benchmarks.perf.decode_vs_llama --llama-bin DIR --llama-src DIR`: SmolLM2-135M-Instruct, "
             "the same weights on both sides (llama.cpp's own `convert_hf_to_gguf.py` writes the GGUF from the "
             "folder prover loads, in F32 and BF16); llama.cpp's side samples nothing, prover's is "
             f"{res.get('prover_sampling', 'greedy with its stop tokens suppressed by a logits processor')}; "
             f"{res['threads']} thread, B distinct prompts of {res['prompt_tokens']} tokens, {res['new_tokens']} "
             "new tokens each, decode time only (each side's run less the same run asked for one token), best of "
             f"{len(next(iter(res['rounds'].values()))['prover'])} alternating rounds, CPU seconds on both sides; "
             f"load average {res['load_average'][0]:.1f} at the end. llama.cpp 0.3.36's "
             f"vendored source, {llama_build(res)}.", "",
             "| precision, batch | prover tokens/s | llama.cpp tokens/s | prover / llama.cpp | prover's weight "
             f"stream (GB/s) | {OFF} tokens/s |", "|---|---|---|---|---|---|"]
    read = one_thread_read(bandwidth) if bandwidth else None
    for key, sides in best.items():
        dtype, batch = key.split(" batch ")
        rate, llama, off = sides["prover"], sides.get("llama.cpp"), sides.get(OFF)
        stream = wb.get(dtype, 0) * rate / int(batch) / 1e9  # one weight read per step of all B rows
        share = f" ({100 * stream / read:.0f}% of a thread's read rate)" if read and batch == "1" else ""
        lines.append(f"| {dtype}, {batch} | {rate:.1f} | {f'{llama:.1f}' if llama else '-'} | "
                     f"{f'{rate / llama:.2f}x' if llama else '-'} | {stream:.1f}{share} | "
                     f"{f'{off:.1f}' if off else '-'} |")
    lines += ["", f"Measured on: {res.get('cpu', '?')}; the engine's kernels built for "
              f"{res.get('gemv_isa') or 'no AVX-512 (torch only)'}. *{OFF}* is the same engine with "
              "`cpu_kernels=false fused_decode_step=false`: transformers' module-by-module forward and torch's "
              "products, side by side in the same rounds. " + decode_reading(res)]
    if "cpu_info" in res:
        lines += ["", cpu_line(res["cpu_info"])]
    if "provenance" in res:
        lines += ["", f"> {res['provenance']}"]
    return lines


def kernel_rows_lines(res: dict) -> list[str]:
    """The small-batch kernels against torch's products by rows of input (kernel_rows.py), on the CPU it names."""
    rows = res["settings"]["rows"]
    lines = ["", "### The engine's kernels against torch's products, by rows of input", "",
             "`python -m benchmarks.perf.kernel_rows`: SmolLM2-135M-Instruct's decode products "
             f"({res['settings']['layers']} layers of 7 matrices, random numbers of the real shapes, more than the "
             "last-level cache holds), one "
             f"thread, best of {res['settings']['rounds']} passes by CPU seconds; load average "
             f"{res['load']['start']:.1f} at the start (the numbers move by a fifth between runs at that load). The "
             f"kernels built for {res['gemv_isa']}. Each cell: GB/s of weights read by the kernel, by torch's "
             "`F.linear`, and the kernel's speed over torch's. `MAX_ROWS` in `prover.engines.decode_kernels` "
             "takes the kernel up to the row count where it stops winning on each instruction set.", "",
             "| weights | " + " | ".join(f"{r} row{'s' if r != 1 else ''}" for r in rows) + " |",
             "|---|" + "---|" * len(rows)]
    for name, sweep in res["dtypes"].items():
        cells = [sweep["rows"][str(r)] for r in rows]
        lines.append(f"| {name} | " + " | ".join(f"{c['kernel_gb_per_s']:.1f} / {c['torch_gb_per_s']:.1f} "
                                                  f"({c['torch_over_kernel']:.2f}x)" for c in cells) + " |")
    lines += ["", cpu_line(res["cpu"]) + " " + (
        "Without bfloat16 instructions torch converts in software, which is why its bfloat16 products fall so far "
        "behind; the kernel widens bfloat16 to float32 in registers and reads half the bytes."
        if not res["cpu"].get("flags", {}).get("avx512_bf16") else "")]
    return lines


def stopped_rows_lines(res: dict) -> list[str]:
    """Stopped rows left out of the decode step against fed pads (stopped_rows.py), on the CPU it names."""
    lines = ["", "### Rows that stopped, left out of the decode step", "",
             f"`python -m benchmarks.perf.stopped_rows`: one turn of {res['rows']} SmolLM2-135M-Instruct chats, "
             f"each {res['context']} tokens already in the KV cache, rows stopping after "
             f"{min(next(iter(res['dtypes'].values()))['lengths'])} to "
             f"{max(next(iter(res['dtypes'].values()))['lengths'])} new tokens, spread evenly; {res['threads']} "
             "thread, best of the rounds by CPU seconds, the two sides interleaved. `fed` feeds stopped rows pads "
             "until the last row stops, as `generate` does; `left out` is the engine's loop. Row-step share: the "
             "generated tokens over rows x steps.", "",
             "| weights | left out (s) | fed (s) | fed / left out | row-step share |", "|---|---|---|---|---|"]
    for name, r in res["dtypes"].items():
        lines.append(f"| {name} | {r['best']['dropped']:.2f} | {r['best']['fed']:.2f} | "
                     f"{r['ratio_fed_over_dropped']:.2f}x | {r['row_step_share']:.2f} |")
    lines += ["", cpu_line(res["cpu_info"]) + f" Kernels built for {res['gemv_isa']}; measured {res['measured']}, "
              f"load average {res['load_start'][0]:.1f} at the start and {res['load_end'][0]:.1f} at the end."]
    return lines


def step_results(results: dict) -> list[tuple[str, dict]]:
    """Each step ratio measured, labelled by case, precision and (for the second CPU's) ``AVX2``."""
    out = []
    for case, label in STEP_CASES.items():
        for key, where in ((f"step-ratio-{case}", ""), (f"step-ratio-{case}-noamx", NO_AMX),
                           (f"step-ratio-{case}-avx2", AVX2)):
            res = results.get(key)
            if res is not None:
                precision = "float32" if "model.engine_dtype=float32" in res["command"] else "bfloat16"
                out.append((f"{label}, {precision}{where}", res))
    return out


def step_lines(results: dict) -> list[str]:
    lines = ["", "### A real model's RL step against the revision before the decode loop", "",
             "`python -m benchmarks.perf.step_ratio --before REV --case CASE [--precision float32]`: the revision "
             "before the decode loop (*before*, which decodes with transformers' generate) beside this tree "
             "(*after*: prover's decode loop, fused step and CPU kernels, the prefix cache as it is now), the same "
             "settings in both trees (no warm start, GRPO, 4 tasks x 4 episodes, chat context, LoRA; the engine "
             "and the update in the precision the row names: bfloat16 sampling and autocast, or float32 on a CPU "
             "that emulates bfloat16), one step, the two runs at once with one thread each. CPU seconds are each "
             "process's own (rusage), from start to end; phase seconds are wall clock.", "",
             "| case | before / after: CPU s | step (wall) | rollout | learner | after: step s (rollout, "
             "learner) | generated tokens |", "|---|---|---|---|---|---|---|"]
    costs = []
    for label, res in step_results(results):
        r, a = res["ratios"], res["runs"]["after"]
        b = res["runs"]["before"]["seconds"]
        costs.append(f"{label}: with the learner as it is, a rollout that took no time at all would make the step "
                     f"at most {b['step'] / a['seconds']['learner']:.1f}x faster than *before*'s "
                     f"({b['step']:.0f} s against the update's {a['seconds']['learner']:.0f} s)")
        split = a.get("generation", {})
        if split.get("prefill") and split.get("decode"):
            rest = a["seconds"]["step"] - split["decode"]
            costs.append(f"{label}: *after*'s rollout spent {split['prefill']:.0f} s prefilling prompts and "
                         f"{split['decode']:.0f} s decoding; a decode that took no time at all would make the step "
                         f"at most {b['step'] / rest:.1f}x faster than *before*'s")
        costs.append(f"{label}: {a['cpu_s']:.0f} CPU s for the whole run of one step (model loads and two "
                     f"one-episode evaluations included), so 20 steps take at most {20 * a['cpu_s'] / 60:.0f} "
                     f"minutes of one idle core, {20 * a['seconds']['step'] / 3600:.1f} hours at the measured "
                     "load" + measured_on(res))
        lines.append(f"| {label} ({res['before']} vs {res['after']}) | {r['cpu_before_over_after']:.2f}x | "
                     f"{r['step_before_over_after']:.2f}x | {r['rollout_before_over_after']:.2f}x | "
                     f"{r['learner_before_over_after']:.2f}x | {a['seconds']['step']:.0f} "
                     f"({a['seconds']['rollout']:.0f}, {a['seconds']['learner']:.0f}) | {a['rollout_tokens']:.0f} |")
    lines += [""] + [f"- {c}." for c in costs]
    return lines


def measured_on(res: dict) -> str:
    """Where and under what load a step ratio was measured (results that kept it)."""
    if "cpu" not in res:
        return ""
    c, load = res["cpu"], res["load"]
    return (f" (measured {res['measured']['date']} on {c['model']} {c['family_model_stepping']}, "
            f"{c['torch_cpu_capability']}, {c['cpus']} CPUs; load average {load['start'][0]:.1f} at the start, "
            f"{load['end'][0]:.1f} at the end)")


def logprob_lines(res: dict) -> list[str]:
    """PPO's ratio at step 0 between the engine's sampled log-probs and the learner's (logprob_match.py)."""
    low, high = res["clip_range"]
    lines = ["", "### Sampling log-probs against the learner's", "",
             f"`{res['command'].strip()}`: {res['env']} in the {res['context']} context, temperature "
             f"{res['temperature']}, the learner's own forward on the engine's tokens at step 0; rho outside "
             f"[{low}, {high}] is what PPO clips. A bfloat16 engine (or bfloat16 autocast) moves the ratio off 1 "
             "on every token; `learner.engine_is_cap` (truncated importance sampling, docs/concepts.md) corrects "
             "it.", "", "| model | engine / learner | tokens | mean abs log rho | outside the clip range | max abs "
             "log rho |", "|---|---|---|---|---|---|"]
    for model, settings in res["models"].items():
        for name, m in settings.items():
            lines.append(f"| {model} | {name} | {m['tokens']} | {m['mean_abs_log_rho']:.2e} | "
                         f"{100 * m['share_outside_clip']:.2f}% | {m['max_abs_log_rho']:.3f} |")
    return lines


def section(results: dict) -> list[str]:
    lines = [TITLE]
    if "bandwidth" in results:
        lines += bandwidth_lines(results["bandwidth"])
    if "decode-vs-llama" in results:
        lines += decode_lines(results["decode-vs-llama"], results.get("bandwidth"))
    if "bandwidth-avx2" in results:
        lines += bandwidth_lines(results["bandwidth-avx2"], AVX2)
    if "decode-vs-llama-avx2" in results:
        lines += decode_lines(results["decode-vs-llama-avx2"], results.get("bandwidth-avx2"), AVX2)
    if "bandwidth-noamx" in results:
        lines += bandwidth_lines(results["bandwidth-noamx"], NO_AMX)
    if "decode-vs-llama-noamx" in results:
        lines += decode_lines(results["decode-vs-llama-noamx"], results.get("bandwidth-noamx"), NO_AMX)
    if "kernel-rows" in results:
        lines += kernel_rows_lines(results["kernel-rows"])
    for isa in ("avx512bf16", "avx512", "avx2"):  # stopped_rows.py names its file by the kernels' build
        if f"stopped-rows-{isa}" in results:
            lines += stopped_rows_lines(results[f"stopped-rows-{isa}"])
    if step_results(results):
        lines += step_lines(results)
    if "logprob-match" in results:
        lines += logprob_lines(results["logprob-match"])
    return lines


def summary_rows(results: dict) -> list[str]:
    """The summary table's rows: the bandwidth ceiling, decode against llama.cpp, the step ratios."""
    rows = []
    if "bandwidth" in results:
        read = results["bandwidth"]["stream"]["gb_per_s"]["read"]
        rows.append(f"| the limit of a decode step: memory read bandwidth, 1 thread; 2 threads | {read['1']:.1f} GB/s; "
                    f"{read.get('2', float('nan')):.1f} GB/s |")
    for name, where in (("decode-vs-llama", ""), ("decode-vs-llama-avx2", AVX2), ("decode-vs-llama-noamx", NO_AMX)):
        if name not in results:
            continue
        best = results[name]["best"]
        for dtype in ("float32", "bfloat16"):
            keys = [k for k in best if k.startswith(dtype) and "llama.cpp" in best[k]]
            if keys:
                rows.append(f"| decode tokens/s, prover / llama.cpp, same {dtype} weights, 1 thread{where}, batch "
                            f"{', '.join(k.split(' batch ')[1] for k in keys)} | "
                            + "; ".join(f"{best[k]['prover'] / best[k]['llama.cpp']:.2f}x" for k in keys) + " |")
    for label, res in step_results(results):
        r = res["ratios"]
        rows.append(f"| an RL step of {label}, {res['before']} (transformers' generate) / {res['after']}: CPU "
                    "time; rollout | "
                    f"{r['cpu_before_over_after']:.2f}x; {r['rollout_before_over_after']:.2f}x |")
    return rows

"""docs/perf.md's section on the limit (benchmarks.perf.limits' results): this CPU's matrix-product peak, each phase
of the main job against it, and the threads and padding levers."""

from __future__ import annotations

from pathlib import Path

from benchmarks.perf.results import when

PHASE_ROWS = [("warm-start SFT", "sft/train", "sft"), ("learner update", "learner/train", "learner"),
              ("rollout: prefill", "rollout/prefill", None), ("rollout: decode", "rollout/decode", None),
              ("Brancher: prefill", "Brancher/prefill", None), ("Brancher: decode", "Brancher/decode", None),
              ("evaluation: prefill", "evaluation/prefill", None), ("evaluation: decode", "evaluation/decode", None)]


def phase_seconds(res: dict, key: str, wall: str | None) -> float:
    """A phase row's wall seconds: the phase's own clock (SFT, learner), the prefill passes' time, or
    generate's time less its prefill (decode: the steps and generate's Python between them)."""
    if wall is not None:
        return res["walls"].get(wall, 0.0)
    if key.endswith("/prefill"):
        return res["tallies"][key]["forward_s"]
    return res["walls"].get(key, 0.0)


def peak_of(res: dict) -> float:
    """This machine's peak: the best product of the peak table, at either thread count."""
    return max(g for r in res["peak"] for g in r["gflops"].values())


def reencoded(res: dict, phase: str) -> str:
    """Prompt tokens per generated token, and the share prefix sharing served (the step's engine counts)."""
    st, name = res["step"], {"rollout": "rollout", "Brancher": "branch"}.get(phase)
    if name is None or not st.get(f"cost/{name}_tokens"):
        return ""
    prompt = st.get(f"cost/{name}_prompt_tokens", 0.0)
    cached = st.get(f"cost/{name}_cached_tokens", 0.0) / prompt if prompt else 0.0
    return (f"; {prompt / st[f'cost/{name}_tokens']:.0f} prompt tokens per generated token (every turn re-encodes "
            f"task, history and observation), {cached:.0%} of them shared within a call")


def why(res: dict, key: str, t: dict, seconds: float) -> str:
    """What keeps a phase from the peak, in its own numbers."""
    inside = t["forward_flops"] / t["forward_s"] / 1e9 if t["forward_s"] else 0.0
    pad = 1 - t["tokens"] / t["padded_tokens"] if t["padded_tokens"] else 0.0
    per = t["padded_tokens"] / t["calls"]
    if key.endswith("/train"):
        return (f"{per:.0f} token slots per pass, forward at {inside:.1f} GFLOP/s; {1 - t['forward_s'] / seconds:.0%} "
                f"of the time outside the forward (backward, optimizer); padding {pad:.1%}")
    if key.endswith("/decode"):
        floor = res.get("step_floor_ms", {})
        fixed = f" (a 1-row step alone: {floor['1']:.1f} ms, 64 rows: {floor['64']:.1f} ms)" if floor else ""
        return (f"{per:.0f} rows x 1 token per step, {1000 * seconds / t['calls']:.1f} ms per step{fixed}, "
                f"{1 - t['forward_s'] / seconds:.0%} of it generate's Python between steps; {pad:.0%} of the "
                "row-steps ran rows that had already stopped")
    phase = key.split("/")[0]
    return f"{per:.0f} token slots per pass at {inside:.1f} GFLOP/s; padding {pad:.1%}" + reencoded(res, phase)


def limits_phases(res: dict, peak: float) -> list[str]:
    lines = ["| phase | real tokens | padding | GFLOP needed | GFLOP computed | s | achieved GFLOP/s | of the "
             "peak | why it is far from it |", "|---|---|---|---|---|---|---|---|---|"]
    for label, key, wall in PHASE_ROWS:
        t = res["tallies"].get(key)
        if not t or not t["calls"]:
            continue
        s = phase_seconds(res, key, wall)
        rate = t["flops"] / s / 1e9 if s else 0.0
        pad = 1 - t["tokens"] / t["padded_tokens"] if t["padded_tokens"] else 0.0
        lines.append(f"| {label} | {t['tokens']:,.0f} | {pad:.1%} | {t['flops'] / 1e9:.1f} | "
                     f"{t['padded_flops'] / 1e9:.1f} | {s:.1f} | {rate:.2f} | {rate / peak:.1%} | "
                     f"{why(res, key, t, s)} |")
    for phase in ("rollout", "Brancher", "evaluation"):
        model = sum(phase_seconds(res, f"{phase}/{k}", None) for k in ("prefill", "decode")
                    if f"{phase}/{k}" in res["tallies"])
        if phase in res["walls"]:
            rest = res["walls"][phase] - model
            lines.append(f"| {phase}: outside the model | | | | | {rest:.1f} | | | envs, prompts and their "
                         f"tokenizing, log-probs: {rest / res['walls'][phase]:.0%} of the phase's "
                         f"{res['walls'][phase]:.1f} s |")
    return lines


def section_limits(res: dict) -> list[str]:
    peak_rows, peak = res["peak"], peak_of(res)
    load = res["load"]
    lines = ["## The limit", "",
             f"`python -m benchmarks.perf.limits --sft-episodes {res['settings']['sft_episodes']} --eval-episodes "
             f"{res['settings']['eval_episodes']}`; load average (1 min) {load['start'][0]:.1f} at the start, "
             f"{res['phases_load_avg']:.1f} after the phases, {load['end'][0]:.1f} at the end, on {res['cpus']} "
             "CPUs, at nice 19 next to other work.", "",
             "### This machine's peak", "",
             "fp32 matrix products with torch, the best of 5 rounds of 0.15 s each.", "",
             "| product (m x k x n) | 1 thread GFLOP/s | 2 threads GFLOP/s | 2 threads / 1 |", "|---|---|---|---|"]
    for r in peak_rows:
        g = r["gflops"]
        lines.append(f"| {r['shape']} ({r['m']} x {r['k']} x {r['n']}) | {g['1']:.1f} | {g['2']:.1f} | "
                     f"{g['2'] / g['1']:.2f}x |")
    lines += ["", f"The peak below is the best of them, **{peak:.0f} GFLOP/s**.", "",
              "### Each phase of the main job against it", "", PHASES_TEXT.format(
                  policy=Path(res["policy"]).name, rows=res["sft"]["rows"], eval=res["settings"]["eval_episodes"]), ""]
    lines += limits_phases(res, peak)
    return lines + ["", reading(res, peak), "", when(res), ""] + limits_levers(res)


PHASES_TEXT = (
    "The SFT on {rows} expert turns from the untrained tiny base, and one ProVer step of the main job "
    "(`prover train` defaults: 8 tasks x 8 episodes, up to 20 turns) from its warm-started policy ({policy}) "
    "between two evaluations of {eval} episodes, all at 1 torch thread. FLOPs are counted for every forward "
    "pass from the model's config and the shapes it was called with (`benchmarks/perf/flops.py`): 2 per weight per "
    "token (6 with the backward), 2 x hidden x vocab per position through the LM head, 4 x heads x head_dim "
    "per layer per (query, key) pair. *Needed* counts the real tokens, each query against the real keys "
    "before it; *computed* the padded rectangle the call ran. Seconds: the SFT's and the learner's own "
    "clocks (backward and optimizer included); for prefill the prompt passes; for decode generate's time "
    "less its first step. *Achieved* is needed GFLOP over those seconds.")


def limits_levers(res: dict) -> list[str]:
    th, pad = res["levers"]["threads"], res["levers"]["padding"]
    sft1, sft2 = (sum(th["sft_batches_per_s"][k]) / len(th["sft_batches_per_s"][k]) for k in ("1", "2"))
    rl1, rl2 = th["rl_step_s"]["1"], th["rl_step_s"]["2"]
    lines = ["### Lever: threads", "",
             f"The same process alternates 1 and 2 torch threads (load average {th['load_avg']:.1f} after): the "
             f"SFT on {th['sft_rows']} of the turns above twice at each, and one RL step (ProVer, 2 tasks x 8 "
             "episodes) at each, its `threads` set in the config.", "",
             "| work | 1 thread | 2 threads | 2 threads / 1 thread (time) |", "|---|---|---|---|",
             f"| SFT, batches/s (each run) | {', '.join(f'{x:.2f}' for x in th['sft_batches_per_s']['1'])} | "
             f"{', '.join(f'{x:.2f}' for x in th['sft_batches_per_s']['2'])} | {sft1 / sft2:.2f}x |",
             f"| RL step, s | {rl1:.1f} | {rl2:.1f} | {rl2 / rl1:.2f}x |", "", THREADS_TEXT, "",
             "### Lever: padding", "",
             "The same rows batched the old way and the new way, each on a fresh learner, alternated twice: the "
             "SFT's turns above (one epoch, batches of 8) and the RL step's update (its batch, kept).", "",
             "| work | batching | padding share | s (each run) | time / before (sum) |", "|---|---|---|---|---|"]
    for what, label in (("sft", "SFT"), ("learner", "RL update")):
        ways = list(pad[what].items())
        first = sum(ways[0][1]["seconds"])
        lines += [f"| {label} | {name} | {v['padding_share']:.1%} | {', '.join(f'{x:.1f}' for x in v['seconds'])} "
                  f"| {sum(v['seconds']) / first:.2f}x |" for name, v in ways]
    return lines + ["", PADDING_TEXT]


THREADS_TEXT = (
    "**The default.** `threads` (a top-level setting: `prover train threads=2`) unset gives a model of hidden "
    "size up to 256, the tiny policy, 1 torch thread, unless `OMP_NUM_THREADS` or `MKL_NUM_THREADS` is set, "
    "which then decides; a larger model keeps torch's default, one thread per core. Its products are a few "
    "MFLOP each: split over two threads, each waits for the other at every operation, and on a shared CPU a "
    "waiting thread waits for a core too (the peak table's tiny shapes). A larger model on a machine of its "
    "own gains from more threads; this shared machine could not show that (its large products gained "
    "nothing at 2 threads either), so the default leaves torch's choice there.")

PADDING_TEXT = (
    "Both levers are the learner's since 74610c4 (`length_batches`: shuffle, sort runs of 32 batches' worth "
    "of rows by length, cut, shuffle the batches; `micro_batch_order`: a mini-batch's rows by length over its "
    "micro-batches); *before* rebuilds the old batching with `length_batches(..., pool=1)` and the "
    "shuffled order. The SFT's batches are still random draws, each from one length band; the RL update's "
    "loss is a weighted sum over the whole mini-batch, so its order changes nothing but rounding "
    "(`tests/test_learner_padding.py`: the same loss and gradient in one micro-batch, by length and shuffled). "
    "Both now report their share: `sft/padding_share` in the warm start's note, `learner/padding_share` in "
    "every step's metrics.")


def limits_summary(res: dict) -> list[str]:
    peak = peak_of(res)
    rates = {label: res["tallies"][key]["flops"] / phase_seconds(res, key, wall) / 1e9
             for label, key, wall in PHASE_ROWS if res["tallies"].get(key, {}).get("calls")}
    th = res["levers"]["threads"]
    sft1, sft2 = (sum(v) / len(v) for v in (th["sft_batches_per_s"]["1"], th["sft_batches_per_s"]["2"]))
    best, worst = max(rates, key=rates.get), min(rates, key=rates.get)
    return [f"| the limit: fp32 matrix products (best shape and thread count) | {peak:.0f} GFLOP/s |",
            f"| main job's phases, achieved / peak: best ({best}); worst ({worst}) | {rates[best] / peak:.1%}; "
            f"{rates[worst] / peak:.2%} |",
            f"| SFT at 2 torch threads / 1 thread (time); RL step | {sft1 / sft2:.1f}x; "
            f"{th['rl_step_s']['2'] / th['rl_step_s']['1']:.1f}x |"]


def reading(res: dict, peak: float) -> str:
    """The phase table in words: which phase is far from the limit, and why."""
    tl, walls, st = res["tallies"], res["walls"], res["step"]
    dec, pre = tl["rollout/decode"], tl["rollout/prefill"]
    floor = res.get("step_floor_ms", {"1": 0.0, "64": 1.0})
    n = {"dec": dec["flops"] / walls["rollout/decode"] / 1e9 / peak, "rows": dec["padded_tokens"] / dec["calls"],
         "fixed": floor["1"] / floor["64"], "stopped": 1 - dec["tokens"] / dec["padded_tokens"],
         "dec_time": walls["rollout/decode"] / walls["rollout"], "pre": pre["flops"] / pre["forward_s"] / 1e9 / peak,
         "reencode": st["cost/rollout_prompt_tokens"] / st["cost/rollout_tokens"],
         "pre_pad": 1 - pre["tokens"] / pre["padded_tokens"],
         "sft": tl["sft/train"]["flops"] / walls["sft"] / 1e9 / peak,
         "learner": tl["learner/train"]["flops"] / walls["learner"] / 1e9 / peak,
         "fwd": max(tl[k]["forward_flops"] / tl[k]["forward_s"] for k in ("sft/train", "learner/train")) / 1e9
         / max(r["gflops"]["1"] for r in res["peak"] if r["shape"].startswith("tiny"))}
    return (
        "**Reading.** Decode is the phase far from the limit ({dec:.0%} of the peak in the rollout): each step is "
        "one token per row, so its products are {rows:.0f} x 128, and a step has a fixed cost (the model's dozens "
        "of small operations, each dispatched from Python, and the cache growing): a 1-row step took {fixed:.0%} "
        "of a 64-row one. On top of that `generate` keeps a stopped row in the batch until every row stops "
        "({stopped:.0%} of the rollout's row-steps). It is a small share of the FLOPs but {dec_time:.0%} of the "
        "rollout's time. Prefill runs closer ({pre:.0%}) on larger passes, but does more work than the result "
        "needs: {reencode:.0f} prompt tokens per generated token, since every turn re-encodes its whole prompt and "
        "no cache outlives a call, plus {pre_pad:.0%} padding. The SFT and the learner reach {sft:.0%} and "
        "{learner:.0%}, padding aside: their forward passes run at up to {fwd:.0%} of a lone product of their "
        "shapes (the peak table's tiny rows), the rest going to what lies between the products (norms, "
        "activations, rotary positions, attention's softmax, the log-softmax over the vocabulary), and the same "
        "again in the backward. Outside the model (envs, prompts) the rollout spends little. "
        "Not done here: dropping stopped rows from decode (a decode loop of our own instead of `generate`), "
        "keeping a row's cache from one turn to the next, larger SFT batches (fewer updates for the same data: "
        "another result).").format(**n)

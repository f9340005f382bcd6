"""Recall@k of the gold passages, queries per second and index build time, for every retrieval backend.

    python -m benchmarks.perf.retrieval [--questions 300] [--seed 0] [--split test] [--n-kbs 4] [--k 3]

Questions are drawn as searchqa-sim draws them (base ``i % n_kbs`` of the split, a uniform kind,
then a uniform question). A question's gold passages are its hop chain's evidence passages
(``Hop.passage_id``: the one passage that states the fact the hop needs, ``kb.evidence``).

Recall columns, all at top-k:
- single: the one hop's gold passage, retrieved with the oracle's hop query ("<entity> born").
- multi any / all: bridge and comparison questions; any = at least one hop's gold passage found by
  its own hop query, all = every hop's (what answering needs).
- question: the question text itself as the query, with no query writing at all; a hit is any of
  the question's gold passages in the top k (for a bridge question only hop 1 can match), and at
  R@1 the top passage alone, where the distractors (namesakes, relatives, football clubs) bite.

Speed: ``build s`` indexes all bases from scratch into an empty cache, ``load s`` reopens them from
that cache, ``startup s`` is the one-off import plus model load (dense) or JVM start (pyserini),
and queries/s runs every query above once as one ``search_many`` per base (batch), and the first
``--one-by-one`` of them with ``search``, one query at a time. Backends whose extra is not installed
are listed as skipped. ``--compare-threads`` adds a dense row that encodes queries with torch's own
thread count instead of one thread (``DenseRetriever(query_threads=None)``).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time

from prover.envs.searchqa_sim.kb import generate
from prover.envs.searchqa_sim.questions import KINDS, questions
from prover.errors import ProverError
from prover.retrieval import RETRIEVERS, Passage, check_backend, make_retriever


def sample_questions(n: int, seed: int, split: str, n_kbs: int) -> tuple[dict, list]:
    """The bases by tag, and ``n`` (tag, question) pairs drawn the way the env draws them."""
    bases = {f"{split}-{i}": generate(f"{split}-{i}") for i in range(n_kbs)}
    pools = {tag: questions(kb) for tag, kb in bases.items()}
    rng = random.Random(seed)
    picked = []
    for i in range(n):
        tag = f"{split}-{i % n_kbs}"
        pool = pools[tag][rng.choice(KINDS)]
        picked.append((tag, pool[rng.randrange(len(pool))]))
    return bases, picked


def run_backend(name: str, bases: dict, picked: list, k: int, one_by_one: int, **options) -> dict:
    t0 = time.perf_counter()  # imports, model load or JVM start, paid once per process
    make_retriever(name, [Passage("w0", "Warm", "warm up text"), Passage("w1", "Up", "more words")],
                   cache_dir=False).search("warm up", 1)
    startup = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as cache:
        t0 = time.perf_counter()
        retrievers = {tag: make_retriever(name, kb.passages, cache_dir=cache, **options)
                      for tag, kb in bases.items()}
        build = time.perf_counter() - t0
        t0 = time.perf_counter()
        reloaded = {tag: make_retriever(name, kb.passages, cache_dir=cache) for tag, kb in bases.items()}
        load = time.perf_counter() - t0
        assert all(r.loaded_from_cache for r in reloaded.values())

    # every query once: each hop's oracle query, then the question text
    per_tag: dict[str, list[str]] = {tag: [] for tag in bases}
    for tag, q in picked:
        per_tag[tag] += [h.query for h in q.hops] + [q.text]
    n_queries = sum(len(v) for v in per_tag.values())
    t0 = time.perf_counter()
    batch = {tag: retrievers[tag].search_many(qs, k) for tag, qs in per_tag.items()}
    t_batch = time.perf_counter() - t0
    singles = [(tag, query) for tag, qs in per_tag.items() for query in qs][:one_by_one]
    t0 = time.perf_counter()
    for tag, query in singles:
        retrievers[tag].search(query, k)
    t_single = time.perf_counter() - t0

    cursor = {tag: 0 for tag in bases}
    single, any_hop, all_hops, question, question_top1 = [], [], [], [], []
    for tag, q in picked:  # walk the batch results in the order the queries were laid out
        rows = batch[tag][cursor[tag]: cursor[tag] + len(q.hops) + 1]
        cursor[tag] += len(q.hops) + 1
        hop_hits = [h.passage_id in {p.id for p in row} for h, row in zip(q.hops, rows)]
        if len(q.hops) == 1:
            single.append(hop_hits[0])
        else:
            any_hop.append(any(hop_hits))
            all_hops.append(all(hop_hits))
        gold = {h.passage_id for h in q.hops}
        question.append(bool(gold & {p.id for p in rows[-1]}))
        question_top1.append(bool(rows[-1]) and rows[-1][0].id in gold)
    mean = lambda xs: sum(xs) / max(1, len(xs))  # noqa: E731
    return {"startup": startup, "build": build, "load": load, "single": mean(single),
            "any": mean(any_hop), "all": mean(all_hops), "question": mean(question),
            "question1": mean(question_top1), "qps_batch": n_queries / t_batch,
            "qps_single": len(singles) / t_single,
            "n": (len(single), len(any_hop), n_queries)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--split", default="test", choices=["train", "test"])
    ap.add_argument("--n-kbs", type=int, default=4)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--one-by-one", type=int, default=200, help="queries timed one at a time")
    ap.add_argument("--backends", default=",".join(RETRIEVERS.builtins))
    ap.add_argument("--compare-threads", action="store_true", help="add dense with torch's thread count")
    args = ap.parse_args()
    bases, picked = sample_questions(args.questions, args.seed, args.split, args.n_kbs)
    n_passages = sum(len(kb.passages) for kb in bases.values())
    results, skipped = {}, []
    for name in args.backends.split(","):
        try:
            check_backend(name)
        except ProverError as exc:
            skipped.append(f"{name}: {exc}")
            continue
        results[name] = run_backend(name, bases, picked, args.k, args.one_by_one)
        if name == "dense" and args.compare_threads:
            import torch

            label = f"dense, queries on {torch.get_num_threads()} torch threads"
            results[label] = run_backend(name, bases, picked, args.k, args.one_by_one, query_threads=None)
    if not results:
        raise SystemExit("no backend could run:\n" + "\n".join(skipped))
    n_single, n_multi, n_queries = next(iter(results.values()))["n"]
    k = args.k
    print(f"{args.questions} {args.split} questions (seed {args.seed}; {n_single} single-hop, {n_multi} "
          f"multi-hop), {args.n_kbs} bases, {n_passages} passages; {n_queries} queries in batches, "
          f"the first {min(args.one_by_one, n_queries)} also one by one")
    print(f"| backend | single R@{k} | multi any-hop R@{k} | multi all-hops R@{k} | question-as-query R@{k} "
          f"| question-as-query R@1 | queries/s batch | queries/s one-by-one | build s | cached load s "
          f"| startup s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['single']:.3f} | {r['any']:.3f} | {r['all']:.3f} | {r['question']:.3f} "
              f"| {r['question1']:.3f} | {r['qps_batch']:.0f} | {r['qps_single']:.0f} | {r['build']:.2f} "
              f"| {r['load']:.3f} | {r['startup']:.1f} |")
    for line in skipped:
        print(f"skipped {line}")


if __name__ == "__main__":
    main()

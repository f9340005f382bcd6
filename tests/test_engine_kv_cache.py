"""The ``hf`` engine's prefix cache across calls (``prover.engines.kv_cache``): a multi-turn chat whose every
prompt starts with the previous prompt and completion gets the same greedy tokens and log-probs as with no
reuse at all, samples from the same distribution, prefills only its new tokens, stays within its memory
bound, and forgets everything when the weights change.

The model is the tiny policy with its weights redrawn larger (as in tests/test_engine_prefix.py): at its own
small init every next token is near uniform, so a row served another row's or stale columns would go unseen.
"""

from __future__ import annotations

import random
import shutil
import time

import numpy as np
import pytest
import torch

from prover.engines.hf import HFEngine
from prover.engines.kv_cache import BLOCK, PrefixCache, kv_bytes
from prover.types import SamplingParams
from test_engine_prefix import first_prompts

GREEDY = SamplingParams(max_new_tokens=8, temperature=0.0)


@pytest.fixture(scope="module")
def sharp_dir(tiny_policy_dir, tmp_path_factory):
    """The tiny policy's folder with its projections and embeddings redrawn at a larger scale."""
    from prover.learning.modeling import load_model

    out = tmp_path_factory.mktemp("sharp")
    for f in tiny_policy_dir.iterdir():
        if f.is_file():
            shutil.copy(f, out / f.name)
    model = load_model(tiny_policy_dir)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:  # embeddings and projections; the norms keep their ones
                p.copy_(torch.randn(p.shape, generator=g) * 2.0 / p.shape[-1] ** 0.5)
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def pair(sharp_dir):
    """(prefix cache on, no reuse of any kind), on the same weights."""
    cached, plain = HFEngine(sharp_dir, device="cpu"), HFEngine(sharp_dir, device="cpu", share_prefixes=False)
    assert cached.sharing == "prefix" and cached.prefix_cache is not None and plain.prefix_cache is None
    return cached, plain


class Weights:
    """What ``update_weights`` reads from a learner."""

    def __init__(self, state: dict[str, torch.Tensor]) -> None:
        self.state = state

    def policy_state_dict(self) -> dict[str, torch.Tensor]:
        return self.state


def observation(rng: random.Random, vocab: int) -> list[int]:
    return [rng.randrange(3, vocab) for _ in range(rng.randrange(5, 30))]


def chat_turns(engines, first: list[list[int]], turns: int, params: SamplingParams, seed: int = 0):
    """Each engine plays the same append-only chats: turn t+1's prompt is turn t's prompt and the cached
    engine's completion, then a new observation. Yields (prompts, generations per engine) every turn."""
    rng, prompts = random.Random(seed), [list(p) for p in first]
    vocab = engines[0].model.config.vocab_size
    for turn in range(turns):
        gens = [e.generate(prompts, params, seed=turn) for e in engines]
        yield prompts, gens
        prompts = [p + g.token_ids + observation(rng, vocab) for p, g in zip(prompts, gens[0])]


def assert_same(got, want) -> None:
    for a, b in zip(got, want):
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)


def test_greedy_chats_are_the_same_with_the_cache_and_without(pair):
    """Rows of different lengths (left padded), a group's duplicate first prompts, and at turn 3 a branch
    point's K continuations (duplicates of one chat's prompt); the later turns mostly served by the cache."""
    cached, plain = pair
    a, b, c = first_prompts(cached.tokenizer, "pivot-sim", 3)
    cached.prefix_cache.clear()
    served = []
    for turn, (prompts, (got, want)) in enumerate(chat_turns(pair, [a, a, b, c, c, c], 5, GREEDY)):
        assert_same(got, want)
        counts = cached.take_counts()
        served.append(counts["cost/cached_tokens"] / counts["cost/prompt_tokens"])
        if turn == 3:  # three continuations of the first chat, as the Brancher asks
            branch = [prompts[0] + got[0].token_ids] * 3
            assert_same(cached.generate(branch, GREEDY), plain.generate(branch, GREEDY))
            assert [g.cached_tokens for g in cached.generate(branch, GREEDY)] == [len(branch[0]) - 1] * 3
            cached.take_counts()
    plain.take_counts()
    assert served[0] > 0.5 and min(served[1:]) > 0.6, served  # duplicates and header, then the chats


def test_sampled_tokens_have_the_log_probs_of_the_uncached_model(pair):
    """At temperature 1 the cache changes nothing the sampler reads: every sampled token's log-prob equals
    the one the model gives it with no cache (``logprobs`` of the plain engine), turn after turn."""
    cached, plain = pair
    cached.prefix_cache.clear()
    a, b = first_prompts(cached.tokenizer, "pivot-sim", 2)
    params = SamplingParams(max_new_tokens=8, temperature=1.0)
    n = 0
    for prompts, (got,) in chat_turns([cached], [a, a, a, b, b], 4, params, seed=1):
        want = plain.logprobs(prompts, [g.token_ids for g in got])
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.logprobs, w, atol=1e-4)
            n += len(g.token_ids)
    assert n > 100 and cached.take_counts()["cost/cached_tokens"] > 0


def test_counts_add_up_and_only_new_tokens_are_prefilled(pair):
    """Distinct chats at their second turn: each row reuses its first prompt and the completion tokens
    generate fed back (all but the last step's, which no row ran), and at most all but its own last token."""
    cached, _ = pair
    cached.prefix_cache.clear()
    rng = random.Random(2)
    first = [[1] + [rng.randrange(3, 400) for _ in range(39 + 7 * k)] for k in range(3)]
    params = SamplingParams(max_new_tokens=6, temperature=0.0)
    gens = cached.generate(first, params)
    steps = max(len(g.token_ids) for g in gens)  # the batch ran until its last row stopped
    cached.take_counts()
    nxt = [p + g.token_ids + observation(rng, 400) for p, g in zip(first, gens)]
    later = cached.generate(nxt, params)
    counts = cached.take_counts()
    reused = [min(len(p) + min(len(g.token_ids), steps - 1), len(q) - 1) for p, g, q in zip(first, gens, nxt)]
    assert [g.cached_tokens for g in later] == reused
    assert counts["cost/prompt_tokens"] == sum(map(len, nxt))
    assert counts["cost/prefill_tokens"] == sum(len(q) - r for q, r in zip(nxt, reused))
    assert counts["cost/prompt_tokens"] == counts["cost/prefill_tokens"] + counts["cost/cached_tokens"]


def test_counts_split_a_calls_wall_time_into_prefill_and_decode(pair):
    cached, _ = pair
    cached.take_counts()
    prompts = [[1] + list(range(5, 5 + 30 + 9 * k)) for k in range(3)]
    started = time.perf_counter()
    cached.generate(prompts, SamplingParams(max_new_tokens=8, temperature=0.0))
    wall = time.perf_counter() - started
    counts = cached.take_counts()
    assert counts["time/prefill"] > 0 and counts["time/decode"] > 0
    assert counts["time/prefill"] + counts["time/decode"] <= wall
    assert cached.take_counts()["time/decode"] == 0.0  # taken means reset


def test_weight_sync_empties_the_cache_and_nothing_stale_is_served(pair, sharp_dir):
    """A chat's first turn under one set of weights, its later turns under others: the same as an engine
    that never saw the first weights."""
    cached, _ = pair
    cached.prefix_cache.clear()
    old = {k: v.clone() for k, v in cached.model.state_dict().items()}
    g = torch.Generator().manual_seed(5)
    new = {k: v + 0.5 * v.std() * torch.randn(v.shape, generator=g) if v.dim() >= 2 else v for k, v in old.items()}
    fresh = HFEngine(sharp_dir, device="cpu", share_prefixes=False)
    fresh.update_weights(Weights(new))
    try:
        first = first_prompts(cached.tokenizer, "pivot-sim", 3)
        gens = cached.generate(first, GREEDY)
        assert len(cached.prefix_cache) > 0
        cached.update_weights(Weights(new))
        assert len(cached.prefix_cache) == 0 and cached.prefix_cache.nbytes == 0
        rng = random.Random(3)
        nxt = [p + g.token_ids + observation(rng, 400) for p, g in zip(first, gens)]
        assert_same(cached.generate(nxt, GREEDY), fresh.generate(nxt, GREEDY))
        assert cached.take_counts()["cost/prompt_tokens"] > 0
    finally:
        cached.update_weights(Weights(old))


@pytest.mark.slow
def test_lora_weights_merged_by_the_learner_give_the_same_chats(pair, sharp_dir):
    from prover.config import LearnerConfig, LoraConfig
    from prover.learning.learner import Learner

    cached, plain = pair
    old = {k: v.clone() for k, v in cached.model.state_dict().items()}
    learner = Learner(sharp_dir, LearnerConfig(), lora=LoraConfig(enabled=True, rank=4, alpha=8.0))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # nonzero A and B: a fresh adapter's B is 0
        for name, p in learner.unwrapped().named_parameters():
            if ".lora_" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    try:
        cached.generate(first_prompts(cached.tokenizer, "pivot-sim", 2), GREEDY)  # entries of the base weights
        cached.update_weights(learner)
        plain.update_weights(learner)
        a, b = first_prompts(cached.tokenizer, "pivot-sim", 2)
        for _, (got, want) in chat_turns(pair, [a, b, b], 4, GREEDY, seed=4):
            assert_same(got, want)
        assert cached.take_counts()["cost/cached_tokens"] > 0
    finally:
        cached.update_weights(Weights(old))
        plain.update_weights(Weights(old))


def test_memory_stays_within_the_bound_under_a_flood_of_distinct_prompts(sharp_dir):
    """1 MiB holds a few hundred of these rows' columns; 40 calls of 16 distinct prompts bring about three
    times that. The bytes counted are the tensors' own, recounted from the entries."""
    engine = HFEngine(sharp_dir, device="cpu", prefix_cache_mb=1)
    rng = random.Random(0)
    store, bound = engine.prefix_cache, 2**20
    params = SamplingParams(max_new_tokens=4, temperature=0.0)
    calls = [[[1] + [rng.randrange(3, 400) for _ in range(rng.randrange(60, 100))] for _ in range(16)]
             for _ in range(40)]
    peak, offered = 0, 0  # offered: the bytes of every row's columns, had all been kept
    for prompts in calls:
        gens = engine.generate(prompts, params)
        steps = max(len(g.token_ids) for g in gens)
        per_token = kv_bytes(next(iter(store.entries.values())).kv) // len(next(iter(store.entries.values())).tokens)
        offered += sum(len(p) + min(len(g.token_ids), steps - 1) for p, g in zip(prompts, gens)) * per_token
        recount = sum(kv_bytes(e.kv) for e in store.entries.values())
        assert recount == store.nbytes <= bound
        peak = max(peak, store.nbytes)
    assert offered > 2 * bound and peak > bound // 2  # the flood was larger than the bound, and the cache was used
    assert sum(len(h) for h in store.index.values()) == sum(len(e.blocks) for e in store.entries.values())
    # the newest chats are still served; the oldest were evicted
    engine.take_counts()
    last = calls[-1][0] + gens[0].token_ids + [5, 6, 7]
    assert engine.generate([last], params)[0].cached_tokens >= len(calls[-1][0])
    assert engine.generate([calls[0][0] + [5, 6, 7]], params)[0].cached_tokens == 0


def fake_kv(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.full((1, n, 2), float(n)), torch.full((1, n, 2), float(n)))]


def test_the_store_finds_the_longest_prefix_supersedes_and_evicts_the_least_recently_used():
    store = PrefixCache(max_bytes=3 * kv_bytes(fake_kv(40)))
    a = list(range(40))
    store.put(a, lambda: fake_kv(40))
    assert store.match(a[:35] + [99, 98]) == (store.entries[tuple(a)], 35)
    assert store.match(a[:BLOCK - 1] + [99] * 20) == (None, 0)  # no whole block in common
    store.put(a + [7] * 10, lambda: fake_kv(50))  # a is its prefix: superseded
    assert list(store.entries) == [tuple(a + [7] * 10)] and store.nbytes == kv_bytes(fake_kv(50))
    store.put(a[:30], lambda: pytest.fail("covered already: not copied"))
    b, c = [1000 + t for t in range(40)], [2000 + t for t in range(40)]
    store.put(b, lambda: fake_kv(40))
    store.begin_call([a + [7] * 10 + [1]])  # the next call uses a's chat again: b is unpinned, and the oldest
    store.put(c, lambda: fake_kv(40))
    assert set(store.entries) == {tuple(a + [7] * 10), tuple(c)} and store.nbytes <= store.max_bytes
    assert store.match(b) == (None, 0) and all(tuple(b) not in h for h in store.index.values())
    store.clear()
    assert (len(store), store.nbytes, store.index) == (0, 0, {})


def test_a_full_cache_keeps_the_running_calls_chats_and_declines_what_does_not_fit():
    """Room for 160 tokens. Three chats grow 10 tokens a call past it: the entry of an earlier call's chat
    makes room, then new entries are declined and the shorter ones they would supersede stay. Plain LRU
    would evict chat a's newest entry to store c's and serve a nothing on the next call."""
    token = kv_bytes(fake_kv(1))
    store = PrefixCache(max_bytes=160 * token)
    a, b, c, d = ([base + t for t in range(40)] for base in (1000, 2000, 3000, 4000))
    grow = [list(range(10 * k, 10 * k + 10)) for k in range(1, 5)]
    store.begin_call([d])
    store.put(d, lambda: fake_kv(40))
    chats = [a, b, c]
    for k in range(3):  # calls 2, 3, 4: the chats at 40, 50 and 60 tokens
        store.begin_call(chats)
        for chat in chats:
            store.put(chat, lambda chat=chat: fake_kv(len(chat)))
        if k == 1:  # d, from an earlier call, made room for the chats' growth
            assert set(store.entries) == {tuple(ch) for ch in chats} and store.nbytes == 150 * token
        chats = [ch + grow[k] for ch in chats]
    assert sorted(len(e.tokens) for e in store.entries.values()) == [50, 50, 60]
    assert store.nbytes == 160 * token == sum(kv_bytes(e.kv) for e in store.entries.values())
    store.begin_call(chats)
    assert [store.match(ch)[1] for ch in chats] == [60, 50, 50]  # every chat still served most of its tokens


def test_a_chat_rollout_past_the_bound_still_reuses_and_stays_exact(sharp_dir, pair):
    """Eight greedy chats whose columns outgrow a bound of about their first two turns: every row keeps
    being served at least its first prompt from the cache, the bound holds, and the tokens and log-probs
    equal the engine without reuse."""
    cached, plain = HFEngine(sharp_dir, device="cpu"), pair[1]
    rng = random.Random(3)
    first = [[1] + [rng.randrange(3, 400) for _ in range(30 + 5 * k)] for k in range(8)]
    cfg = cached.model.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    per_token = cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * head_dim * 4  # float32 keys and values
    cached.prefix_cache.max_bytes = 2 * sum(len(p) + 12 for p in first) * per_token
    grown = 0
    for turn, (prompts, (got, want)) in enumerate(chat_turns([cached, plain], first, 6, GREEDY)):
        assert_same(got, want)
        grown = sum(len(p) for p in prompts)
        assert cached.prefix_cache.nbytes <= cached.prefix_cache.max_bytes
        if turn:
            assert all(g.cached_tokens >= len(p) for g, p in zip(got, first)), turn
    assert grown * per_token > cached.prefix_cache.max_bytes  # the chats outgrew it


def test_prefix_cache_mb_is_an_engine_setting(sharp_dir, monkeypatch):
    from prover.engines import kv_cache
    from prover.errors import ConfigError

    assert HFEngine.validate_kwargs({}).prefix_cache_mb == "auto"
    monkeypatch.setattr(kv_cache, "available_bytes", lambda: 6 * 2**30)
    assert HFEngine(sharp_dir, device="cpu").prefix_cache.max_bytes == 2 * 2**30  # a third of what is free
    monkeypatch.setattr(kv_cache, "available_bytes", lambda: None)
    assert HFEngine(sharp_dir, device="cpu").prefix_cache.max_bytes == 2**30
    assert HFEngine(sharp_dir, device="cpu", prefix_cache_mb=3).prefix_cache.max_bytes == 3 * 2**20
    for bad in (-1, 2.5, "lots"):
        with pytest.raises(ConfigError, match="must be 'auto' or a whole number of MiB"):
            HFEngine.validate_kwargs({"prefix_cache_mb": bad})
    assert HFEngine.validate_kwargs({"prefix_cache_mb": 0}).prefix_cache_mb == 0


@pytest.mark.slow
def test_smollm2_chats_are_the_same_with_the_cache_and_without():
    """A real chat model (SmolLM2-135M-Instruct from ``prover convert-gguf``, float32): three append-only
    turns of rows of different lengths and a duplicate, greedy, the cache on and off."""
    from prover.errors import ConfigError
    from prover.judges.gguf_convert import convert

    try:
        folder, _ = convert()  # once per machine: ~/.cache/prover/models/smollm2-135m-instruct
    except ConfigError as exc:
        pytest.skip(f"{exc} (the README's test command installs it with --no-deps)")
    pair = HFEngine(folder, device="cpu"), HFEngine(folder, device="cpu", share_prefixes=False)
    a, b = first_prompts(pair[0].tokenizer, "pivot-sim", 2)
    for _, (got, want) in chat_turns(pair, [a, b, b[:-9]], 3, SamplingParams(max_new_tokens=12, temperature=0.0)):
        for x, y in zip(got, want):
            assert x.token_ids == y.token_ids
            np.testing.assert_allclose(x.logprobs, y.logprobs, atol=1e-4)
    counts = pair[0].take_counts()
    assert counts["cost/cached_tokens"] > counts["cost/prefill_tokens"]

"""The ``hf`` engine's own decode loop (``prover.engines.decode``) against transformers' ``generate``: the same
tokens greedy and, with the same seed, sampled (temperature, top-k, top-p, a caller's logits processor), log-probs
of the unrestricted temperature-scaled distribution within float rounding, rows that stop early padded, and a
KV cache written in place into the buffer it reserved.

The model is the tiny policy with its weights redrawn larger (tests/test_engine_kv_cache.py's ``sharp_dir``),
so that next-token distributions are peaked and a wrong column or position changes the tokens.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from prover.engines import decode as decode_loop
from prover.engines.decode import ReservedLayer, empty_reserved_cache, reserved_cache, warpers
from prover.engines.hf import HFEngine
from prover.types import SamplingParams
from test_engine_kv_cache import sharp_dir  # noqa: F401  (the fixture)
from test_engine_prefix import first_prompts

SETTINGS = [
    (SamplingParams(max_new_tokens=12, temperature=0.0), None),
    (SamplingParams(max_new_tokens=12, temperature=1.0), 7),
    (SamplingParams(max_new_tokens=12, temperature=0.7, top_k=5, top_p=0.8), 3),
]


@pytest.fixture(scope="module")
def loop_and_generate(sharp_dir):  # noqa: F811
    return (HFEngine(sharp_dir, device="cpu", decode_loop=True, prefix_cache_mb=0),
            HFEngine(sharp_dir, device="cpu", decode_loop=False, prefix_cache_mb=0))


def prompts_of(engine: HFEngine) -> list[list[int]]:
    """Prompts of different lengths (left padding in the batch) and a duplicate."""
    base = first_prompts(engine.tokenizer, "alfworld-sim", 3)
    return [base[0], base[1][: len(base[1]) // 2], base[2], base[0]]


@pytest.mark.parametrize("params,seed", SETTINGS)
def test_the_loop_draws_what_generate_draws(loop_and_generate, params, seed):
    loop, gen = loop_and_generate
    prompts = prompts_of(loop)
    ours, theirs = loop.generate(prompts, params, seed=seed), gen.generate(prompts, params, seed=seed)
    assert [g.token_ids for g in ours] == [g.token_ids for g in theirs]
    assert [g.finish_reason for g in ours] == [g.finish_reason for g in theirs]
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)


def test_a_callers_processor_restricts_the_draw_but_not_the_log_probs(loop_and_generate):
    """Banning the tokens generate picks greedily: both pick the same others, and the log-probs stay those of
    the unrestricted distribution, which the engine's own re-scoring gives."""
    from transformers import SuppressTokensLogitsProcessor

    loop, gen = loop_and_generate
    prompts = prompts_of(loop)
    free = gen.generate(prompts, SETTINGS[0][0])
    banned = sorted({t for g in free for t in g.token_ids[:2]})
    ban = lambda: [SuppressTokensLogitsProcessor(banned)]  # noqa: E731
    ours = loop.generate(prompts, SETTINGS[0][0], logits_processor=ban)
    theirs = gen.generate(prompts, SETTINGS[0][0], logits_processor=ban)
    assert [g.token_ids for g in ours] == [g.token_ids for g in theirs]
    assert not any(t in banned for g in ours for t in g.token_ids)
    rescored = loop.logprobs(prompts, [g.token_ids for g in ours])
    for g, r in zip(ours, rescored):
        np.testing.assert_allclose(g.logprobs, r, atol=1e-4)


def test_rows_that_stop_are_cut_at_their_stop_token(loop_and_generate):
    """Every token a greedy row generates made a stop token: each row ends at its first one."""
    loop, gen = loop_and_generate
    prompts = prompts_of(loop)
    first = [g.token_ids[0] for g in gen.generate(prompts, SamplingParams(max_new_tokens=1, temperature=0.0))]
    stops = tuple(sorted(set(first[:1])))
    params = SamplingParams(max_new_tokens=12, temperature=0.0, stop_token_ids=stops)
    ours, theirs = loop.generate(prompts, params), gen.generate(prompts, params)
    assert [g.token_ids for g in ours] == [g.token_ids for g in theirs]
    assert ours[0].token_ids == [first[0]] and ours[0].finish_reason == "stop"


def test_the_reserved_cache_writes_in_place_and_refuses_past_its_capacity():
    keys = torch.zeros((2, 1, 5, 4))
    cache = reserved_cache([(keys, torch.zeros_like(keys))], used=2)
    layer = cache.layers[0]
    assert isinstance(layer, ReservedLayer) and cache.get_seq_length() == 2
    step = torch.ones((2, 1, 1, 4))
    k, v = layer.update(step, 2 * step)
    assert k.shape[2] == 3 and k.data_ptr() == keys.data_ptr()  # a view of the reserved buffer, not a copy
    assert torch.equal(keys[:, :, 2], torch.ones((2, 1, 4))) and torch.equal(v[:, :, 2], 2 * torch.ones((2, 1, 4)))
    layer.update(torch.ones((2, 1, 2, 4)), torch.ones((2, 1, 2, 4)))
    with pytest.raises(RuntimeError, match="cannot take column 6"):
        layer.update(step, step)


def test_sampling_is_what_the_params_say_and_nothing_else():
    """Greedy applies no warper; sampling applies temperature, top-k and top-p only when set."""
    assert len(warpers(SamplingParams(temperature=0.0, top_k=5, top_p=0.5), None)) == 0
    assert len(warpers(SamplingParams(temperature=1.0), None)) == 0
    names = [type(w).__name__ for w in warpers(SamplingParams(temperature=0.5, top_k=3, top_p=0.9), None)]
    assert names == ["TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper"]


def test_one_token_prompts_decode_into_a_cache_reserved_empty(loop_and_generate):
    """Nothing to prefill (every prompt one token): the loop starts from empty reserved layers."""
    loop, gen = loop_and_generate
    prompts = [[p[0]] for p in prompts_of(loop)]
    for params, seed in SETTINGS[:2]:
        ours, theirs = loop.generate(prompts, params, seed=seed), gen.generate(prompts, params, seed=seed)
        assert [g.token_ids for g in ours] == [g.token_ids for g in theirs]


def test_the_fused_step_and_cpu_kernels_change_no_greedy_token(sharp_dir):  # noqa: F811
    """float32: the engine with its fused step and CPU kernels (the default) against the same engine with both
    off (transformers' forward, torch's products): the same greedy tokens, log-probs equal up to float32
    rounding of sums taken in another order."""
    on = HFEngine(sharp_dir, device="cpu", prefix_cache_mb=0)
    off = HFEngine(sharp_dir, device="cpu", prefix_cache_mb=0, cpu_kernels=False, fused_decode_step=False)
    assert on.fused_step is not None and off.fused_step is None
    prompts = prompts_of(on)
    params = SamplingParams(max_new_tokens=16, temperature=0.0)
    ours, theirs = on.generate(prompts, params), off.generate(prompts, params)
    assert [g.token_ids for g in ours] == [g.token_ids for g in theirs]
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_rows_that_stopped_leave_the_step_and_change_nothing(sharp_dir, dtype, monkeypatch):  # noqa: F811
    """Sampled rows that stop at different times, decoded with stopped rows left out of the step and fed pads
    as generate does: the same tokens, bit for bit the same log-probs up to each row's stop, and the same KV in
    every column the prefix cache keeps (the stop token's column included). Up to max_rows rows the products
    take the same kernel either way; the step did run fewer rows."""
    engine = HFEngine(sharp_dir, device="cpu", prefix_cache_mb=0, dtype=dtype)
    assert engine.fused_step is not None
    prompts = prompts_of(engine)
    ids = torch.full((len(prompts), max(len(p) for p in prompts)), engine.pad_id)
    attn = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, ids.shape[1] - len(p):], attn[i, ids.shape[1] - len(p):] = torch.tensor(p), 1
    vocab = engine.model.config.vocab_size
    stops = list(range(0, vocab, 9))  # a ninth of the tokens stop a row: rows end at different steps
    params = SamplingParams(max_new_tokens=24, temperature=1.0)
    rows_fed: list[int] = []
    step = engine.fused_step.__call__
    monkeypatch.setattr(type(engine.fused_step), "__call__",
                        lambda self, ids, *a, **k: rows_fed.append(ids.shape[0]) or step(ids, *a, **k))

    def run(drop: bool):
        torch.manual_seed(3)
        cache = empty_reserved_cache(engine.model.config.num_hidden_layers, ids.shape[1] + params.max_new_tokens)
        return decode_loop.decode(engine.model, ids, attn, cache, engine.cache_kwarg, params, stops, engine.pad_id,
                                  None, engine.fused_step, drop_stopped=drop)

    fed, dropped = run(False), run(True)
    assert min(rows_fed[len(rows_fed) // 2:]) < len(prompts)  # the second run left stopped rows out
    assert torch.equal(fed.tokens, dropped.tokens)
    steps = fed.tokens.shape[1]
    for i, row in enumerate(fed.tokens.tolist()):
        made = next((n + 1 for n, t in enumerate(row) if t in stops), steps)
        assert torch.equal(fed.logprobs[i, :made], dropped.logprobs[i, :made])
        kept = ids.shape[1] + min(made, steps - 1)  # columns the prefix cache keeps: each fed token's
        for a, b in zip(fed.cache.layers, dropped.cache.layers):
            assert torch.equal(a.key_buffer[i, :, :kept], b.key_buffer[i, :, :kept])
            assert torch.equal(a.value_buffer[i, :, :kept], b.value_buffer[i, :, :kept])

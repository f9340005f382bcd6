"""prover.engines.fused_step against transformers' forward, on small random models of each architecture it
takes (Llama, without and with attention biases; Qwen2, whose query, key and value projections have biases;
Qwen3, whose queries and keys have per-head norms), on a left-padded batch continuing a reserved cache: the
same logits and the same new key and value columns up to float rounding, and still after a weight sync.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

from prover.engines.decode import empty_reserved_cache
from prover.engines.fused_step import FusedStep, supports

SMALL = dict(vocab_size=300, hidden_size=96, intermediate_size=160, num_hidden_layers=3, num_attention_heads=6,
             num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6)
CONFIGS = {
    "llama": lambda: LlamaConfig(**SMALL, head_dim=16, tie_word_embeddings=True),
    "llama-biased": lambda: LlamaConfig(**SMALL, attention_bias=True),  # biases on q, k, v and o
    "qwen2": lambda: Qwen2Config(**SMALL, tie_word_embeddings=False),
    "qwen3": lambda: Qwen3Config(**SMALL, head_dim=16, tie_word_embeddings=True),
}


def random_model(kind: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(CONFIGS[kind](), attn_implementation="sdpa").eval()
    with torch.no_grad():  # norms and biases off their ones and zeros, so a dropped one shows
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.3 * torch.randn_like(p) if "norm" in name else 0.3 * torch.randn_like(p))
    return model


def batch(length: int = 9):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 300, (3, length), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :3], mask[2, :5] = 0, 0  # left padding
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def both(model: torch.nn.Module, fused: FusedStep):
    """The last column's logits by the forward and by the fused step, each continuing its own cache of the
    first columns; and the two caches."""
    ids, mask, pos = batch()
    layers = model.config.num_hidden_layers
    caches = [empty_reserved_cache(layers, ids.shape[1] + 2) for _ in range(2)]
    with torch.inference_mode():
        for cache in caches:
            model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=pos[:, :-1], cache=cache,
                  use_cache=True)
        forward = model(input_ids=ids[:, -1:], attention_mask=mask, position_ids=pos[:, -1:],
                        cache=caches[0], use_cache=True, logits_to_keep=1).logits[:, -1]
        step = fused(ids[:, -1:], mask, pos[:, -1:], caches[1].layers)
    return forward, step, caches


@pytest.mark.parametrize("kind", sorted(CONFIGS))
@pytest.mark.parametrize("kernels", [False, True])
def test_the_step_computes_the_forward(kind, kernels):
    model = random_model(kind)
    assert supports(model) is None
    forward, step, (a, b) = both(model, FusedStep(model, use_kernels=kernels))
    torch.testing.assert_close(step, forward, atol=1e-4, rtol=1e-4)
    for la, lb in zip(a.layers, b.layers):
        torch.testing.assert_close(lb.keys, la.keys, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(lb.values, la.values, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_a_weight_sync_reaches_the_stacked_weights(kind):
    """load_state_dict after the step is built (what update_weights does): the step follows the new weights."""
    model = random_model(kind, seed=0)
    fused = FusedStep(model)
    model.load_state_dict(random_model(kind, seed=5).state_dict())
    forward, step, _ = both(model, fused)
    torch.testing.assert_close(step, forward, atol=1e-4, rtol=1e-4)
    old_forward, _, _ = both(random_model(kind, seed=0), FusedStep(random_model(kind, seed=0)))
    assert (step - old_forward).abs().max() > 0.1  # the new weights changed the logits


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_bfloat16_is_as_close_to_float32_as_the_forward_is(kind):
    """In bfloat16 the two round differently (sum orders, where a cast falls), so the bound is against
    float32: the step's error is within twice the forward's own, and its argmax agrees as often."""
    exact, _, _ = both(random_model(kind), FusedStep(random_model(kind)))
    model = random_model(kind).to(torch.bfloat16)
    forward, step, _ = both(model, FusedStep(model))
    forward_err = (forward.float() - exact).abs().max()
    step_err = (step.float() - exact).abs().max()
    assert step_err <= 2 * forward_err + 1e-3


@pytest.mark.parametrize("kind", sorted(CONFIGS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_call_through_all_layers_is_the_per_operation_step(kind, dtype, monkeypatch):
    """At few rows every layer runs in one C call (``_layers_in_c``): the same calls in the same order as the
    per-operation path, so bfloat16 is the same to the bit; float32 differs only by SiLU's exp (a polynomial in
    C, torch's own vectorized one in the other), a few units in the last place of the logits."""
    from prover.engines import fused_step

    if not fused_step.kernels_built():
        pytest.skip("no C compiler or no AVX2 here: the kernels are not built")
    model = random_model(kind).to(dtype)
    fused = FusedStep(model)
    assert fused.pointers is not None
    called = []
    monkeypatch.setattr(FusedStep, "_layers_in_c", lambda self, *a, _f=FusedStep._layers_in_c: called.append(1)
                        or _f(self, *a))
    _, one_call, (_, one_cache) = both(model, fused)
    assert called, "three rows: the one-call path"
    fused.pointers = None  # what a model whose weights the C loop cannot take gets
    _, per_op, (_, per_op_cache) = both(model, fused)
    assert len(called) == 1
    exact = dtype == torch.bfloat16
    torch.testing.assert_close(one_call, per_op, atol=0 if exact else 1e-6, rtol=0 if exact else 1e-6)
    for a, b in zip(one_cache.layers, per_op_cache.layers):
        torch.testing.assert_close(a.keys, b.keys, atol=0 if exact else 1e-6, rtol=0 if exact else 1e-6)
        torch.testing.assert_close(a.values, b.values, atol=0 if exact else 1e-6, rtol=0 if exact else 1e-6)


def test_other_architectures_are_refused_with_the_reason():
    from transformers import GPT2Config

    model = AutoModelForCausalLM.from_config(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50))
    assert "gpt2" in supports(model)
    with pytest.raises(ValueError, match="no fused decode step"):
        FusedStep(model)


@pytest.mark.parametrize("kind", sorted(CONFIGS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_weights_moved_into_the_arena_lie_in_use_order_and_compute_the_same(kind, dtype):
    """With the huge-page arena every weight a step reads lies in one buffer, each after the one read before it,
    a tied LM head still is the embedding, and the step's logits and cache are the same to the bit as with the
    weights where torch put them; a weight sync (load_state_dict) writes into the arena."""
    from prover.engines import fused_step

    if not fused_step.kernels_built():
        pytest.skip("no C compiler or no AVX2 here: the kernels (and so the arena) are not used")
    moved, kept = random_model(kind).to(dtype), random_model(kind).to(dtype)
    step, plain = FusedStep(moved), FusedStep(kept, huge_pages=False)
    assert step.arena is not None and plain.arena is None
    # a group's stacked weights, then its stacked biases
    starts = [p.data_ptr() for group in fused_step.use_order(moved)
              for p in [m.weight for m in group] + [getattr(m, "bias", None) for m in group] if p is not None]
    low = step.arena.buffer.data_ptr()
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    assert low <= starts[0] and starts[-1] < low + step.arena.buffer.numel()
    assert moved.lm_head.weight.data_ptr() == starts[-1 - (moved.lm_head.bias is not None)]
    assert (moved.model.embed_tokens.weight is moved.lm_head.weight) == moved.config.tie_word_embeddings
    _, a, (_, cache_a) = both(moved, step)
    _, b, (_, cache_b) = both(kept, plain)
    assert torch.equal(a, b)
    assert all(torch.equal(x.keys, y.keys) and torch.equal(x.values, y.values)
               for x, y in zip(cache_a.layers, cache_b.layers))
    moved.load_state_dict(random_model(kind, seed=5).to(dtype).state_dict())
    assert torch.equal(step.layers[-1].down, random_model(kind, seed=5).to(dtype).model.layers[-1].mlp.down_proj.weight)
    assert low <= step.layers[-1].down.data_ptr() < low + step.arena.buffer.numel()


def test_the_arena_is_backed_by_huge_pages_where_linux_grants_them():
    """An 8 MiB arena, written: /proc/self/smaps shows huge pages in its mapping wherever the kernel's
    transparent huge pages are not off (this machine's CI runs with them on ``madvise``)."""
    from pathlib import Path

    from prover.engines.weight_arena import WeightArena, huge_page_kib

    setting = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not setting.exists() or "[never]" in setting.read_text():
        pytest.skip("no transparent huge pages on this system")
    arena = WeightArena([torch.empty(4 << 20, dtype=torch.float16)])
    view = arena.take(torch.ones(4 << 20, dtype=torch.float16))
    assert arena.huge and view.data_ptr() % (2 << 20) == 0
    assert huge_page_kib(view) >= 2048
    assert view.float().sum().item() == 4 << 20

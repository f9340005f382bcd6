"""``learner.frozen_bf16``: under bfloat16 autocast a frozen linear layer multiplies by a bfloat16 copy of its
weight made once, instead of the cast autocast makes at every forward pass.

Autocast rounds the float32 weight to bfloat16 (round to nearest even) and hands it to the same matrix
product; the copy is that rounding done earlier. So there is no tolerance to state: the loss, the log-probs
and every gradient must be equal bit for bit with the setting on and off.
"""

from __future__ import annotations

import pytest
import torch

from prover.config import LearnerConfig, LoraConfig
from prover.learning.frozen_weights import FrozenBf16Linear, bf16_copies, keep_bf16_copies
from prover.learning.learner import Learner
from test_learner_sequences import batch_of, chats


def learner(policy_dir, frozen_bf16: bool, autocast: str = "bfloat16", lora: bool = True) -> Learner:
    torch.manual_seed(0)  # fresh adapters draw A at random: the same A on both sides
    cfg = LearnerConfig(lr=1e-3, grad_clip=1e9, mini_batch_rows=64, micro_batch_rows=4, autocast=autocast,
                        frozen_bf16=frozen_bf16)
    trained = Learner(policy_dir, cfg, max_completion_tokens=6, seed=0,
                      lora=LoraConfig(enabled=True, rank=4, alpha=8.0) if lora else None)
    with torch.no_grad():  # B starts at zero, which would leave A without a gradient: give B values
        for name, p in trained.unwrapped().named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p) * 0.1)
    return trained


def update(trained: Learner) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    stats = trained.update(*batch_of(chats()))
    grads = {k: p.grad.clone() for k, p in trained.unwrapped().named_parameters() if p.requires_grad}
    assert grads and all(g is not None and bool(g.abs().sum() > 0) for g in grads.values())
    return stats, grads


def frozen_layers(trained: Learner) -> list[FrozenBf16Linear]:
    return [m for m in trained.unwrapped().modules() if isinstance(m, FrozenBf16Linear)]


def test_the_copies_give_autocasts_loss_and_gradient_bit_for_bit(tiny_policy_dir):
    pytest.importorskip("peft")
    on, off = learner(tiny_policy_dir, True), learner(tiny_policy_dir, False)
    seen: dict[bool, list[type]] = {True: [], False: []}
    for key, trained in ((True, on), (False, off)):  # what the LM head is while the update runs
        trained.unwrapped().get_output_embeddings().register_forward_pre_hook(
            lambda module, args, key=key: seen[key].append(type(module)))
    (stats_on, grads_on), (stats_off, grads_off) = update(on), update(off)
    assert set(seen[True]) == {FrozenBf16Linear} and set(seen[False]) == {torch.nn.Linear}
    assert grads_on.keys() == grads_off.keys()
    for name in grads_on:
        assert torch.equal(grads_on[name], grads_off[name]), name
    for key in ("learner/pg_loss", "learner/entropy", "learner/grad_norm", "learner/ppo_kl"):
        assert stats_on[key] == stats_off[key], key
    # the copies live for the update only; the embedding the tied head shares stays a float32 lookup
    assert not frozen_layers(on) and on.unwrapped().get_input_embeddings().weight.dtype == torch.float32
    with bf16_copies(on.unwrapped()) as count:  # every adapted layer's base, and the tied LM head
        assert count == 7 * 2 + 1 == len(frozen_layers(on))
        with bf16_copies(on.unwrapped()) as inner:  # a block inside leaves the outer one's copies alone
            assert inner == 0
        assert len(frozen_layers(on)) == count
    assert not frozen_layers(on) and not any(hasattr(m, "_bf16") for m in on.unwrapped().modules())


def test_the_layer_multiplies_by_its_copy_under_bf16_autocast_only():
    """The copy is what the product reads under bfloat16 autocast (a copy spoiled on purpose shows in the
    output), and only there: in float32 the layer is the plain one."""
    torch.manual_seed(0)
    plain = torch.nn.Linear(16, 8).requires_grad_(False)
    layer = torch.nn.Linear(16, 8).requires_grad_(False)
    layer.load_state_dict(plain.state_dict())
    assert keep_bf16_copies(layer) == [layer] and type(layer) is FrozenBf16Linear
    x = torch.randn(3, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(layer(x), plain(x))
        layer._bf16[0].zero_()  # spoiled without a write to the weight: the product must read it
        assert not torch.equal(layer(x), plain(x))
    assert torch.equal(layer(x), plain(x))  # float32: the weight itself
    assert set(layer.state_dict()) == {"weight", "bias"}  # nothing saved beside the weights


@pytest.mark.parametrize("written", ["weight", "bias"])
def test_a_written_weight_or_bias_is_cast_again(written):
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 8).requires_grad_(False)
    keep_bf16_copies(layer)
    fresh = torch.nn.Linear(16, 8).requires_grad_(False)
    fresh.load_state_dict({**layer.state_dict(), written: fresh.state_dict()[written]})
    with torch.no_grad():  # written in place, alone: that tensor's version moves on
        getattr(layer, written).copy_(getattr(fresh, written))
    x = torch.randn(3, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(layer(x), fresh(x))


def test_only_frozen_plain_linears_get_a_copy(tiny_policy_dir):
    """Every weight training (no LoRA): nothing is frozen, nothing is copied; float32 learners never copy."""
    with bf16_copies(learner(tiny_policy_dir, True, lora=False).unwrapped()) as count:
        assert count == 0
    pytest.importorskip("peft")
    assert not learner(tiny_policy_dir, True, autocast="off").frozen_bf16
    assert learner(tiny_policy_dir, True).frozen_bf16 and not learner(tiny_policy_dir, False).frozen_bf16
    trainable = torch.nn.Linear(4, 4)
    assert keep_bf16_copies(trainable) == [] and type(trainable) is torch.nn.Linear

"""``learner.gradient_checkpointing``: each decoder layer is recomputed in the backward pass instead of keeping
its activations, and the update's gradient is the one without it.

The recompute runs the same operations on the same inputs in the same order, so in float32 the two gradients
may differ only by the rounding of a differently scheduled backward (bound: 1e-6 of the largest entry).
"""

from __future__ import annotations

import pytest
import torch

from prover.config import LearnerConfig, LoraConfig
from prover.errors import ConfigError
from prover.learning.learner import Learner
from prover.learning.modeling import enable_checkpointing
from test_learner_sequences import assert_same_gradient, batch_of, chats


def learner(policy_dir, checkpointing: bool, lora: bool = False) -> Learner:
    torch.manual_seed(0)  # fresh LoRA adapters draw A at random: the same A with and without checkpointing
    cfg = LearnerConfig(lr=1e-3, grad_clip=1e9, mini_batch_rows=64, micro_batch_rows=4,
                        gradient_checkpointing=checkpointing)
    return Learner(policy_dir, cfg, max_completion_tokens=6, seed=0,
                   lora=LoraConfig(enabled=True, rank=4, alpha=8.0) if lora else None)


def gradient(policy_dir, checkpointing: bool, lora: bool = False) -> dict[str, torch.Tensor]:
    """The gradient one update (one mini-batch of three chats) stepped with, by parameter name."""
    trained = learner(policy_dir, checkpointing, lora)
    stats = trained.update(*batch_of(chats()))
    assert stats["learner/updates"] == 1 and stats["learner/sequence_rows"] == 3
    grads = {k: p.grad for k, p in trained.unwrapped().named_parameters() if p.requires_grad}
    # a checkpoint that cut the graph at a layer's input would leave the layers before it without one
    assert all(g is not None for g in grads.values()), [k for k, g in grads.items() if g is None]
    return {k: g.clone() for k, g in grads.items()}


@pytest.mark.parametrize("lora", [False, True], ids=["every weight", "lora"])
def test_checkpointing_gives_the_gradient_without_it(tiny_policy_dir, lora):
    if lora:
        pytest.importorskip("peft")
    plain, recomputed = gradient(tiny_policy_dir, False, lora), gradient(tiny_policy_dir, True, lora)
    assert plain.keys() == recomputed.keys() and len(plain) > 0
    assert_same_gradient(recomputed, plain, 1e-6)


def test_checkpointing_recomputes_each_layer_in_the_backward(tiny_policy_dir):
    """The setting is not ignored: a layer's MLP is entered twice per micro-batch with it (forward, then the
    recompute in the backward; a pre-hook, since the recompute stops as soon as it has the tensors the backward
    needs, before the MLP returns), once without. The three chats of 4, 3 and 5 turns make three micro-batches
    of at most 4 turns."""
    counts = {}
    for checkpointing in (False, True):
        trained = learner(tiny_policy_dir, checkpointing)
        counts[checkpointing] = 0

        def entered(*_, key=checkpointing) -> None:
            counts[key] += 1

        trained.unwrapped().model.layers[0].mlp.register_forward_pre_hook(entered)
        trained.update(*batch_of(chats()))
    assert counts == {False: 3, True: 6}


def test_a_model_without_checkpointing_is_one_config_error():
    class Plain(torch.nn.Module):
        supports_gradient_checkpointing = False

    with pytest.raises(ConfigError, match="learner.gradient_checkpointing=true: Plain does not support"):
        enable_checkpointing(Plain())

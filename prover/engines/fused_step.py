"""One decode step of a Llama-family model (Llama, Qwen2, Qwen3) in a few tensor operations per layer.

At one token a row, a decode step's arithmetic is small and transformers' module-by-module forward spends
as long again in Python and in small operations (a norm is seven of them, each projection its own call) as
in the products. ``FusedStep`` runs the same computation with fewer, larger operations:

1. The query, key and value projections are one product against their weights stacked (``qkv``), and the
   gate and up projections another (``gate_up``). The stacked matrices are built once, and the layers'
   own weights become views of them, so a weight sync (``load_state_dict`` copies in place) updates both.
2. RMSNorm is ``torch.nn.functional.rms_norm`` in float32, then the cast and the scale, as transformers'
   ``LlamaRMSNorm`` computes it in seven operations.
3. Rotary embeddings are applied to queries and keys in one pass over their stacked heads (Qwen3's
   per-head norms first, as its attention does), with cos and sin from the model's own rotary module.
4. With ``use_kernels`` (CPU), products go through ``prover.engines.decode_kernels`` where it applies (few
   rows), else ``F.linear``; and the norms (each with the residual add before it), the rotations with the
   cache write, and attention run in ``decode_kernels.c``, a call each, float32 inside, rounding each stored
   result to the tensors' type.
5. Where the kernels take every product (rows up to ``decode_kernels.max_rows``), the whole loop over layers
   is one C call (``decode_kernels.layers_step``): at one row, a layer's dozen calls from Python cost about a
   third as much as its products. The same calls in the same order; SiLU is computed in C there.
6. With the kernels and ``huge_pages``, every weight the step reads (``use_order``) is moved into one
   ``prover.engines.weight_arena`` buffer in the order the step reads it, on huge pages where Linux grants
   them, and the model's parameters become views of it (the whole forward, prefill included, reads them
   there). The values are unchanged.

Only the decode loop calls it, for steps of one new token a row, with a cache of reserved layers
(``prover.engines.decode.ReservedLayer``); a prompt's prefill still goes through the model's forward. The
logits equal the forward's up to float rounding (the order of sums); ``tests/test_fused_step.py`` compares
them on each supported architecture.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from prover.engines import decode_kernels as kernels
from prover.engines.weight_arena import WeightArena

ARCHITECTURES = ("llama", "qwen2", "qwen3")


def supports(model: torch.nn.Module) -> str | None:
    """None when ``FusedStep`` computes what ``model`` does; else why not."""
    cfg = model.config
    kind = getattr(cfg, "model_type", None)
    if kind not in ARCHITECTURES:
        return f"model_type {kind!r} is not one of {', '.join(ARCHITECTURES)}"
    if getattr(cfg, "hidden_act", "silu") != "silu" or getattr(cfg, "mlp_bias", False):
        return "the MLP is not a bias-free SiLU gate"
    if getattr(cfg, "pretraining_tp", 1) != 1:
        return "pretraining_tp splits the projections"
    if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
        return "a layer is not full attention"
    if getattr(cfg, "use_sliding_window", False):
        return "sliding-window attention"
    return None


@dataclass
class LayerWeights:
    in_norm: torch.Tensor
    post_norm: torch.Tensor
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    o_bias: torch.Tensor | None  # Llama with attention_bias
    gate_up: torch.Tensor
    down: torch.Tensor
    q_norm: torch.Tensor | None  # Qwen3's per-head norms of queries and keys
    k_norm: torch.Tensor | None


def stack_weights(modules: list[torch.nn.Module], arena: WeightArena | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One matrix of ``modules``' weights stacked by rows (and one bias vector), in ``arena`` when given, with
    each module's own parameters made views of it, so that writing either writes both. A module without a
    ``bias`` attribute (a norm) counts as one without a bias."""
    weight = torch.cat([m.weight.detach() for m in modules]).contiguous()
    biases = [b.detach() for m in modules if (b := getattr(m, "bias", None)) is not None]
    bias = torch.cat(biases).contiguous() if len(biases) == len(modules) else None
    if biases and bias is None:
        raise ValueError("some stacked projections have a bias and some do not")
    if arena is not None:
        weight, bias = arena.take(weight), arena.take(bias) if bias is not None else None
    start = 0
    for m in modules:
        rows = m.weight.shape[0]
        m.weight = torch.nn.Parameter(weight[start:start + rows], requires_grad=False)
        if bias is not None:
            m.bias = torch.nn.Parameter(bias[start:start + rows], requires_grad=False)
        start += rows
    return weight, bias


def layer_groups(layer: torch.nn.Module) -> dict[str, list[torch.nn.Module]]:
    """A layer's modules whose weights a decode step reads, in the order it reads them, those stacked into one
    matrix grouped: the input norm, query-key-value, Qwen3's query and key norms, the output projection, the
    post-attention norm, gate-up and down."""
    attn, mlp = layer.self_attn, layer.mlp
    norms = {name: [getattr(attn, name)] for name in ("q_norm", "k_norm") if getattr(attn, name, None) is not None}
    return {"in_norm": [layer.input_layernorm], "qkv": [attn.q_proj, attn.k_proj, attn.v_proj], **norms,
            "o": [attn.o_proj], "post_norm": [layer.post_attention_layernorm], "gate_up": [mlp.gate_proj, mlp.up_proj],
            "down": [mlp.down_proj]}


def final_groups(model: torch.nn.Module) -> list[list[torch.nn.Module]]:
    """What a step reads after the layers: the final norm, then the LM head."""
    return [[model.model.norm], [model.lm_head]]


def use_order(model: torch.nn.Module) -> list[list[torch.nn.Module]]:
    """``layer_groups`` of every layer, then ``final_groups``."""
    return [group for layer in model.model.layers for group in layer_groups(layer).values()] + final_groups(model)


def parameters_of(groups: list[list[torch.nn.Module]]) -> list[torch.Tensor]:
    return [p for group in groups for m in group for p in (m.weight, getattr(m, "bias", None)) if p is not None]


def torch_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    return F.linear(x, weight, bias)


def kernel_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    out = kernels.linear(x, weight, bias)
    return out if out is not None else F.linear(x, weight, bias)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return weight * F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)


class FusedStep:
    """``step(ids, mask, positions, cache)``: the last-position logits (rows, vocab) of a one-token step,
    writing each layer's new key and value column into ``cache``."""

    def __init__(self, model: torch.nn.Module, use_kernels: bool = True, huge_pages: bool = True) -> None:
        why = supports(model)
        if why is not None:
            raise ValueError(f"no fused decode step for this model: {why}")
        cfg, base = model.config, model.model
        self.embed, self.rotary, self.head = base.embed_tokens, base.rotary_emb, model.lm_head
        self.eps = cfg.rms_norm_eps
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.intermediate = cfg.intermediate_size
        self.in_c = use_kernels and kernels_built() and self.head_dim <= 256
        self.linear = kernel_linear if use_kernels else torch_linear
        # the arena serves the C paths' one-row steps, which stream every weight from memory (``weight_arena``)
        arena = WeightArena(parameters_of(use_order(model))) if self.in_c and huge_pages else None
        self.layers = [self._layer(layer, arena) for layer in base.layers]
        if arena is not None:
            tied = base.embed_tokens.weight is model.lm_head.weight
            for group in final_groups(model):
                stack_weights(group, arena)
            if tied:
                base.embed_tokens.weight = model.lm_head.weight
        self.arena = arena
        self.final_norm = base.norm.weight
        # every layer's weights as pointers for one call through all layers (``_layers_in_c``); the tensors stay
        # alive in ``self.layers``, and a weight sync writes into them
        weights = [(w.in_norm, w.post_norm, w.qkv, w.qkv_bias, w.o, w.o_bias, w.gate_up, w.down, w.q_norm, w.k_norm)
                   for w in self.layers]
        flat = [t for layer in weights for t in layer if t is not None]
        uniform = all(t.is_contiguous() and t.dtype == flat[0].dtype and t.device.type == "cpu" for t in flat)
        self.pointers = torch.tensor([t.data_ptr() if t is not None else 0 for layer in weights for t in layer],
                                     dtype=torch.int64) if self.in_c and uniform else None

    def _layer(self, layer: torch.nn.Module, arena: WeightArena | None) -> LayerWeights:
        """The layer's weights as the step reads them: query-key-value and gate-up stacked, and with ``arena``
        every weight moved into it in use order."""
        placed = {name: stack_weights(group, arena) for name, group in layer_groups(layer).items()
                  if arena is not None or len(group) > 1}
        (qkv, qkv_bias), (gate_up, _) = placed["qkv"], placed["gate_up"]
        attn = layer.self_attn
        q_norm, k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
        return LayerWeights(layer.input_layernorm.weight, layer.post_attention_layernorm.weight, qkv, qkv_bias,
                            attn.o_proj.weight, attn.o_proj.bias, gate_up, layer.mlp.down_proj.weight,
                            q_norm.weight if q_norm is not None else None,
                            k_norm.weight if k_norm is not None else None)

    def _rotate(self, qk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = self.head_dim // 2
        turned = torch.cat((-qk[..., half:], qk[..., :half]), dim=-1)
        return qk * cos + turned * sin

    def _attention(self, w: LayerWeights, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   allowed: torch.Tensor, layer: torch.nn.Module) -> torch.Tensor:
        rows, d = x.shape[0], self.head_dim
        qkv = self.linear(x, w.qkv, w.qkv_bias).view(rows, 1, self.heads + 2 * self.kv_heads, d)
        q, k, v = qkv.split((self.heads, self.kv_heads, self.kv_heads), dim=2)
        if w.q_norm is not None and w.k_norm is not None:
            q, k = rms_norm(q, w.q_norm, self.eps), rms_norm(k, w.k_norm, self.eps)
        qk = self._rotate(torch.cat((q, k), dim=2), cos, sin).transpose(1, 2)  # (rows, heads, 1, d)
        keys, values = layer.update(qk[:, self.heads:], v.transpose(1, 2))
        out = F.scaled_dot_product_attention(qk[:, :self.heads], keys, values, attn_mask=allowed,
                                             enable_gqa=self.kv_heads != self.heads)
        return self.linear(out.transpose(1, 2).reshape(rows, 1, self.heads * d), w.o, w.o_bias)

    def takes_rows(self, ids: torch.Tensor, mask: torch.Tensor, cache_layers: list[torch.nn.Module]) -> bool:
        """Whether a step may be given only some of the cache's rows (``cache_rows``): the C paths index the
        cache by row; the torch path writes every row of it."""
        return self.in_c and c_ready(ids, mask, cache_layers)

    @torch.inference_mode()
    def __call__(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
                 cache_layers: list[torch.nn.Module], cache_rows: torch.Tensor | None = None) -> torch.Tensor:
        """``ids`` and ``positions`` (rows, 1); ``mask`` (rows, columns) over every column so far, the new one
        last; ``cache_layers`` the cache's ``ReservedLayer``s, one a layer; ``cache_rows`` (int64, one a row;
        only where ``takes_rows``) the cache row each row is, when the step runs some rows of the cache only."""
        if self.takes_rows(ids, mask, cache_layers):
            if self.pointers is not None and kernels.covers(self.layers[0].qkv, ids.shape[0]):
                return self._layers_in_c(ids, mask, positions, cache_layers, cache_rows)
            return self._in_c(ids, mask, positions, cache_layers, cache_rows)
        if cache_rows is not None:
            raise ValueError("the torch decode step runs every row of the cache")
        h = self.embed(ids)
        cos, sin = self.rotary(h, positions)  # (rows, 1, head_dim)
        cos, sin = cos[:, :, None], sin[:, :, None]  # over the heads
        allowed = mask.bool()[:, None, None, :]
        for w, layer in zip(self.layers, cache_layers):
            h = h + self._attention(w, rms_norm(h, w.in_norm, self.eps), cos, sin, allowed, layer)
            gate_up = self.linear(rms_norm(h, w.post_norm, self.eps), w.gate_up)
            h = h + self.linear(F.silu(gate_up[..., :self.intermediate]) * gate_up[..., self.intermediate:], w.down)
        h = rms_norm(h[:, -1], self.final_norm, self.eps)
        return self.linear(h, self.head.weight, self.head.bias)

    def _in_c(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
              cache_layers: list[torch.nn.Module], cache_rows: torch.Tensor | None) -> torch.Tensor:
        """The same step with norms, rotations, the cache write and attention in ``decode_kernels.c``."""
        rows, d, heads = ids.shape[0], self.head_dim, self.heads
        h = self.embed(ids).reshape(rows, -1)
        cos, sin = (t.contiguous() for t in self.rotary(h, positions))
        x, attended = torch.empty_like(h), h.new_empty((rows, heads * d))
        column = cache_layers[0].keys.shape[2]
        scratch = kernels.attend_scratch(column + 1)
        delta = None
        for w, layer in zip(self.layers, cache_layers):
            kernels.add_rmsnorm(h, delta, w.in_norm, x, self.eps)
            qkv = self.linear(x, w.qkv, w.qkv_bias)
            kernels.rope_store(qkv, heads, self.kv_heads, w.q_norm, w.k_norm, self.eps, cos, sin, layer.key_buffer,
                               layer.value_buffer, column, cache_rows)
            layer.keys, layer.values = layer.key_buffer[:, :, :column + 1], layer.value_buffer[:, :, :column + 1]
            kernels.attend(qkv, heads, layer.key_buffer, layer.value_buffer, column + 1, mask, d ** -0.5, attended,
                           scratch, cache_rows)
            kernels.add_rmsnorm(h, self.linear(attended, w.o, w.o_bias), w.post_norm, x, self.eps)
            gate_up = self.linear(x, w.gate_up)
            delta = self.linear(F.silu(gate_up[:, :self.intermediate]) * gate_up[:, self.intermediate:], w.down)
        kernels.add_rmsnorm(h, delta, self.final_norm, x, self.eps)
        return self.linear(x, self.head.weight, self.head.bias)

    def _layers_in_c(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
                     cache_layers: list[torch.nn.Module], cache_rows: torch.Tensor | None) -> torch.Tensor:
        """``_in_c``'s step with the loop over layers in C as well (``decode_kernels.layers_step``), for rows
        few enough that the kernels take every product; the LM head as before."""
        rows = ids.shape[0]
        h = self.embed(ids).reshape(rows, -1)
        cos, sin = (t.contiguous() for t in self.rotary(h, positions))
        column = cache_layers[0].keys.shape[2]
        x = kernels.layers_step(h, self.pointers, cache_layers, self.final_norm, self.heads, self.kv_heads,
                                self.head_dim, self.intermediate, self.eps, cos, sin, column, mask, cache_rows)
        for layer in cache_layers:
            layer.keys, layer.values = layer.key_buffer[:, :, :column + 1], layer.value_buffer[:, :, :column + 1]
        return self.linear(x, self.head.weight, self.head.bias)


def kernels_built() -> bool:
    return kernels.load()[0] is not None


def c_ready(ids: torch.Tensor, mask: torch.Tensor, cache_layers: list[torch.nn.Module]) -> bool:
    """Whether the tensors are as ``decode_kernels.c`` reads them: on CPU, float32 or bfloat16, an int64 mask
    with unit column stride, every layer's reserved buffers made, contiguous and with room for a column."""
    first = cache_layers[0]
    if (ids.device.type != "cpu" or mask.dtype != torch.int64 or mask.stride(1) != 1
            or not getattr(first, "is_initialized", False) or not hasattr(first, "key_buffer")):
        return False
    dtype, column = first.key_buffer.dtype, first.keys.shape[2]
    return dtype in (torch.float32, torch.bfloat16) and all(
        layer.key_buffer.is_contiguous() and layer.value_buffer.is_contiguous() and layer.key_buffer.dtype == dtype
        and layer.keys.shape[2] == column and column < layer.key_buffer.shape[2] for layer in cache_layers)

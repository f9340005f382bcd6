"""LoRA through peft (``model.lora``): the learner trains low-rank adapters on a frozen policy.

Each adapted linear layer's weight W (out x in) gains factors B (out x r) and A (r x in) and acts as
W + (alpha / r) B A; B starts at zero, so a fresh adapter leaves the policy as it was. Only A and B train,
so gradients and AdamW's moments cover them alone.

- Engines never see an adapter. ``merged_state_dict`` gives the policy's weights under the base model's own
  names and shapes, every adapted W replaced by W + (alpha / r) B A (what peft's ``merge_and_unload`` would
  leave): the ``hf`` engine loads them, the ``sglang`` engine pushes them from disk or by broadcast exactly as
  it pushes fully fine-tuned weights. (SGLang's ``/load_lora_adapter`` would send less, but needs servers
  started with ``--enable-lora`` and a ``--max-lora-rank`` to match, names each adapter per request, and
  serves adapted layers through separate kernels; merged weights work with any server and any ``sync``.)
- A checkpoint holds the adapter alone (peft's ``adapter_model.safetensors`` and ``adapter_config.json``)
  beside the optimizer and RNG state; ``--resume`` rebuilds the frozen base (``prover.policy``: ``model.path``
  or the cached warm start) and loads the adapter onto it; ``prover eval`` merges the two into a folder
  (``prover.policy.merged``, which builds the policy this file only does the arithmetic of).

peft is an optional extra (``pip install 'prover-rl[lora]'``); it is imported only when LoRA is on.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from prover.config import LoraConfig, TrainConfig
from prover.errors import CheckpointError, ConfigError

if TYPE_CHECKING:
    import torch

ADAPTER_CONFIG = "adapter_config.json"  # peft's file: its presence marks an adapter-only checkpoint
PEFT_PREFIX = "base_model.model."  # what peft puts before the base model's own parameter names
INSTALL = "pip install 'prover-rl[lora]'"


def require_peft() -> ModuleType:
    """The peft module; a one-line ConfigError naming the extra when it is missing."""
    try:
        import peft  # an optional extra, and seconds to import
    except ImportError as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"model.lora.enabled=true needs peft ({reason}); install it with: {INSTALL}") from exc
    return peft


def is_adapter_checkpoint(folder: str | Path) -> bool:
    return (Path(folder) / ADAPTER_CONFIG).is_file()


def wrap(model: torch.nn.Module, cfg: LoraConfig, adapter: Path | None = None) -> torch.nn.Module:
    """``model`` with fresh adapters (B = 0), or with those saved in the checkpoint ``adapter``; only the
    adapters require gradients. Bad target names are a one-line ConfigError."""
    peft = require_peft()
    if adapter is not None and not is_adapter_checkpoint(adapter):
        raise CheckpointError(f"checkpoint {str(adapter)!r} holds no LoRA adapter ({ADAPTER_CONFIG}), but "
                              "model.lora.enabled is true")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # peft asks transformers for deprecated attribute names
        # an adapter on a tied layer: _check_mergeable refuses it below, in one line
        warnings.filterwarnings("ignore", message=".*tie_word_embeddings.*", category=UserWarning)
        try:
            if adapter is not None:
                wrapped = peft.PeftModel.from_pretrained(model, str(adapter), is_trainable=True)
            else:
                wrapped = peft.get_peft_model(model, peft.LoraConfig(
                    r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=cfg.target_modules))
        except ValueError as exc:  # peft: "Target modules {...} not found in the base model ..."
            raise ConfigError(f"model.lora.target_modules={cfg.target_modules!r}: {_first_sentence(exc)}; the "
                              f"policy's linear layers are named {', '.join(linear_names(model)) or 'nothing'}"
                              ) from exc
    _check_mergeable(wrapped, peft, cfg)
    return wrapped


def _first_sentence(exc: Exception) -> str:
    return " ".join(str(exc).split()).split(". ")[0][:200]


def linear_names(model: torch.nn.Module) -> list[str]:
    """The last name part of every linear layer (what target_modules matches), without repeats."""
    import torch  # torch is heavy: the config checks read this module without it

    return list(dict.fromkeys(n.rsplit(".", 1)[-1] for n, m in model.named_modules()
                              if isinstance(m, torch.nn.Linear)))


def _check_mergeable(model: torch.nn.Module, peft: ModuleType, cfg: LoraConfig) -> None:
    """Only plain linear layers are merged by ``merged_state_dict``; an adapter on anything else (an
    embedding), or on an LM head that shares its weight with the embedding, would not merge as W + s B A."""
    from peft.tuners.lora import Linear, LoraLayer  # peft is an optional extra

    base = model.get_base_model()
    tied = bool(getattr(base.config, "tie_word_embeddings", False))
    for name, module in base.named_modules():
        if not isinstance(module, LoraLayer):
            continue
        if not isinstance(module, Linear) or (tied and module is base.get_output_embeddings()):
            why = "it is not a linear layer" if not isinstance(module, Linear) else "it shares the embedding's weight"
            raise ConfigError(f"model.lora.target_modules={cfg.target_modules!r} puts an adapter on {name!r}, "
                              f"but {why}; name linear layers only")


def layer_scales(model: torch.nn.Module) -> dict[str, float]:
    """alpha / r of every adapted layer of a wrapped model, by the layer's name in the base model (peft's own
    numbers: an adapter loaded from a checkpoint keeps the rank and alpha it was trained with)."""
    from peft.tuners.lora import LoraLayer  # peft is an optional extra

    return {name: float(m.scaling["default"]) for name, m in model.get_base_model().named_modules()
            if isinstance(m, LoraLayer)}


def merged_state_dict(state: dict[str, torch.Tensor], scales: dict[str, float]) -> dict[str, torch.Tensor]:
    """peft-named weights (a wrapped model's ``state_dict``, or one gathered across processes) as the base
    model's own: each adapted ``<layer>.base_layer.weight`` W becomes ``<layer>.weight`` W + s B A (s =
    ``scales[layer]``), in W's dtype; the adapters' own tensors are left out; the rest pass through."""
    plain = {k.removeprefix(PEFT_PREFIX): v for k, v in state.items()}
    out = {}
    for name, tensor in plain.items():
        if ".lora_" in name:
            continue
        layer, sep, leaf = name.partition(".base_layer.")
        if not sep:
            out[name] = tensor
            continue
        if leaf == "weight":
            a, b = plain[f"{layer}.lora_A.default.weight"], plain[f"{layer}.lora_B.default.weight"]
            tensor = (tensor.float() + scales[layer] * (b.float() @ a.float())).to(tensor.dtype)
        out[f"{layer}.{leaf}"] = tensor
    return out


def save_adapter(model: torch.nn.Module, folder: Path, state: dict[str, torch.Tensor] | None = None) -> None:
    """The adapter alone into ``folder``; ``state``: the wrapped model's weights gathered across processes."""
    model.save_pretrained(str(folder), state_dict=state)
    (folder / "README.md").unlink(missing_ok=True)  # peft's model-card stub: no data, only noise in a checkpoint


def check_base(adapter: Path, base: Path) -> None:
    """The adapter of ``adapter`` was trained on ``base``: the same folder name (a warm start's name hashes its
    base and settings), so a rebuilt or moved run folder still matches."""
    try:
        trained_on = json.loads((adapter / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path") or ""
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{str(adapter / ADAPTER_CONFIG)!r} does not read: {exc}") from exc
    if trained_on and Path(trained_on).name != Path(base).name:
        raise CheckpointError(f"checkpoint {str(adapter)!r} holds a LoRA adapter trained on {trained_on!r}, but this "
                              f"run's policy starts from {str(base)!r}; resume with the config that wrote it")


def check_lora(cfg: TrainConfig) -> None:
    """For preflight: peft imports and ``model.lora.target_modules`` names linear layers of the policy, checked
    on a skeleton of its architecture (no weights: the ``meta`` device) before any work is done."""
    if not cfg.model.lora.enabled:
        return
    require_peft()
    # torch and transformers are heavy: only a LoRA run's preflight needs them
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if cfg.model.path == "tiny":  # the tiny policy's layer names are those of any Qwen3 model
        conf = AutoConfig.for_model("qwen3", vocab_size=64, hidden_size=16, intermediate_size=16,
                                    num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                                    tie_word_embeddings=True)
    else:
        try:
            conf = AutoConfig.from_pretrained(cfg.model.path)
        except Exception as exc:  # the folder check of preflight reports a broken folder; stop here quietly
            raise CheckpointError(f"config.json in {cfg.model.path!r} does not load: {_first_sentence(exc)}") from exc
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(conf)
    wrap(skeleton, cfg.model.lora)


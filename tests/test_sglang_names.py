"""Every tensor name ``sync=distributed`` sends lands in a parameter of SGLang's model, and every such
parameter (every shard of a fused one) gets a tensor: for Qwen3 and Qwen3.5, the families prover trains.

SGLang cannot be imported without CUDA, so its side is a table read from the 0.5.23 wheel's source
(tests/data/sglang_0.5.23_qwen_load_weights.json, with the file:line of each rule and the wheel's
sha256): the renames, skips and fused ("stacked") mappings of ``load_weights``, and the parameter names
of the modules they load into. ``sglang_targets`` applies those rules as ``load_weights`` does. A name
that maps nowhere is dropped by SGLang with at most a log warning, leaving that weight stale on the
server while training goes on, which is why this is checked here rather than found on a GPU.

prover's side is the learner's own ``policy_state_dict()`` (what ``DistributedSync.push`` sends) for
models built from config with random weights, as benchmarks/checks/device_check.py builds Qwen3.5."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
import torch

TABLE = json.loads((Path(__file__).parent / "data" / "sglang_0.5.23_qwen_load_weights.json").read_text())
SHAPES = {  # tiny, with every layer kind: Qwen3.5 alternates Gated DeltaNet and full attention
    "qwen3": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=16),
    "qwen3_5_text": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=2,
                         num_key_value_heads=1, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=2,
                         linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
                         full_attention_interval=2),
}


def layer_kinds(model_type: str, config) -> list[str]:
    """SGLang's layer kinds: qwen3 all attention; Qwen3.5 by full_attention_interval (qwen3_next.py:260-269)."""
    n = config.num_hidden_layers
    if model_type == "qwen3":
        return ["attention"] * n
    # SGLang reads full_attention_interval from config.json (its own Qwen3_5TextConfig); transformers 5 keeps
    # only layer_types when it saves, so `prover serve` checks the folder (prover/commands/serve.py)
    every = SHAPES[model_type]["full_attention_interval"]
    return ["attention" if (i + 1) % every == 0 else "linear_attention" for i in range(n)]


def sglang_params(spec: dict, kinds: list[str], tied: bool) -> set[str]:
    names = set(spec["params"]["global"]) | (set() if tied else set(spec["params"]["untied_head"]))
    for i, kind in enumerate(kinds):
        names |= {t.format(i=i) for t in spec["params"]["layer"][kind]}
    return names


def sglang_targets(spec: dict, names: list[str], params: set[str], tied: bool):
    """Where SGLang's load_weights puts each name: ({parameter: {shard ids}}, [names dropped], [names skipped])."""
    loaded: dict[str, set] = defaultdict(set)
    dropped, skipped = [], []
    outer = spec["outer"]
    for sent in names:
        name = sent
        if outer is not None:  # qwen3_5_text.py:244-269, then the body's own names
            if name == outer["head"]:
                if tied:
                    skipped.append(sent)
                elif name in params:
                    loaded[name].add(None)
                else:
                    dropped.append(sent)
                continue
            if not name.startswith(outer["strip_prefix"]):
                dropped.append(sent)
                continue
            name = name[len(outer["strip_prefix"]):]
        if any(s in name for s in spec["skip_substrings"]):
            skipped.append(sent)
            continue
        for old, new, when in spec["renames"]:
            if when in name:
                name = name.replace(old, new)
        for param, shard_name, shard in spec["stacked"]:
            if shard_name not in name or any(s in name for s in spec["stacked_skip_substrings"]):
                continue
            target = name.replace(shard_name, param)
            if target in params:
                loaded[target].add(tuple(shard) if isinstance(shard, list) else shard)
            else:
                dropped.append(sent)
            break
        else:
            if name in params:
                loaded[name].add(None)
            else:
                dropped.append(sent)
    return loaded, dropped, skipped


def expected_shards(spec: dict, param: str) -> set:
    """Every shard id of a fused parameter (its module is a stacked target), else {None}: loaded whole."""
    module = param.split(".")[-2]
    return {tuple(s) if isinstance(s, list) else s for p, _, s in spec["stacked"] if p.rstrip(".") == module} or {None}


def sent_names(model_type: str, tiny_policy_dir: Path, folder: Path, tied: bool) -> tuple[list[str], object]:
    """The names the learner's policy_state_dict() has, for a model of ``model_type`` built from config."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from prover.config import LearnerConfig
    from prover.learning.learner import Learner

    if model_type not in CONFIG_MAPPING:
        pytest.skip(f"this transformers has no {model_type}")
    vocab = json.loads((tiny_policy_dir / "config.json").read_text())["vocab_size"]
    config = AutoConfig.for_model(model_type, vocab_size=vocab, tie_word_embeddings=tied, pad_token_id=0,
                                  max_position_embeddings=4096, **SHAPES[model_type])
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    for f in tiny_policy_dir.iterdir():  # the tiny policy's tokenizer
        if not f.name.startswith(("config", "generation", "model")):
            shutil.copy(f, folder / f.name)
    learner = Learner(folder, LearnerConfig())
    return list(learner.policy_state_dict()), learner.unwrapped().config


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("model_type", sorted(SHAPES))
def test_every_name_the_sync_sends_loads_into_sglangs_model(model_type, tied, tiny_policy_dir, tmp_path):
    spec = next(s for s in TABLE["models"].values() if s["hf_model_type"] == model_type)
    assert TABLE["source"]["version"] == "0.5.23"  # the version `prover serve` pins, which the table was read from
    names, config = sent_names(model_type, tiny_policy_dir, tmp_path / model_type, tied)
    kinds = layer_kinds(model_type, config)
    if hasattr(config, "layer_types"):  # transformers' own kinds agree with SGLang's
        assert [("attention" if k == "full_attention" else k) for k in config.layer_types] == kinds
    params = sglang_params(spec, kinds, tied)
    loaded, dropped, skipped = sglang_targets(spec, names, params, tied)
    # a tied LM head is the embedding itself on both sides: SGLang lists it once and skips or drops the copy
    harmless = {"lm_head.weight"} if tied else set()
    assert set(dropped) <= harmless and set(skipped) <= harmless, (dropped, skipped)
    assert set(loaded) == params  # no SGLang parameter left with its random or stale value
    for param, shards in loaded.items():
        assert shards == expected_shards(spec, param), param


def test_the_check_catches_names_sglang_would_drop(tiny_policy_dir, tmp_path):
    """The rules can fail: names under another prefix (a peft-wrapped model, or Qwen3.5's multimodal layout
    sent to the text class) and a fused projection left out are reported."""
    spec = TABLE["models"]["qwen3_5_text"]
    names, config = sent_names("qwen3_5_text", tiny_policy_dir, tmp_path / "m", True)
    params = sglang_params(spec, layer_kinds("qwen3_5_text", config), True)
    wrapped = ["base_model.model." + n for n in names]
    assert sglang_targets(spec, wrapped, params, True)[1] == wrapped
    without_z = [n for n in names if ".in_proj_z." not in n]
    loaded = sglang_targets(spec, without_z, params, True)[0]
    assert loaded["layers.0.linear_attn.in_proj_qkvz.weight"] == {(0, 1, 2)} != expected_shards(
        spec, "layers.0.linear_attn.in_proj_qkvz.weight")


def test_serve_refuses_a_qwen35_folder_sglang_cannot_lay_out(tiny_policy_dir, tmp_path):
    """transformers saves layer_types, SGLang 0.5.23 reads full_attention_interval: a folder prover saved
    is refused by `prover serve` with the line to add, and served once it is there."""
    from prover.commands.serve import _model_dir
    from prover.errors import ConfigError

    sent_names("qwen3_5_text", tiny_policy_dir, tmp_path / "m", True)
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert "full_attention_interval" not in config and config["layer_types"][:2] == ["linear_attention",
                                                                                     "full_attention"]
    with pytest.raises(ConfigError, match='add "full_attention_interval": 2 to it') as err:
        _model_dir(str(tmp_path / "m"), "--model")
    assert "\n" not in str(err.value)
    (tmp_path / "m" / "config.json").write_text(json.dumps({**config, "full_attention_interval": 2}))
    assert _model_dir(str(tmp_path / "m"), "--model") == (tmp_path / "m").resolve()

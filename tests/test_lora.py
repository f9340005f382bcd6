"""LoRA (``model.lora``, prover/learning/lora.py) on the tiny policy: settings, what trains, what the engines get, what
a checkpoint holds and what --resume restores.

Expected numbers come from LoRA's definition: an adapted linear layer's weight W (out x in) with factors
B (out x r) and A (r x in) acts as W + (alpha / r) B A, computed here by hand from the tensors, never by
prover's merging code; the trainable parameter count is r (in + out) per adapted layer."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from prover.cli import main
from prover.config import LearnerConfig, LoraConfig, TrainConfig
from prover.config_load import load_config
from prover.errors import ConfigError
from prover.settings.config_text import field_help
from prover.types import Advantages, SamplingParams

RANK, ALPHA = 4, 8.0
SCALE = ALPHA / RANK  # the definition's alpha / r
LORA = LoraConfig(enabled=True, rank=RANK, alpha=ALPHA)
GREEDY = SamplingParams(max_new_tokens=8, temperature=0.0)
PEFT_MARK = "base_model.model."


def lora_learner(folder, **learner):
    from prover.learning.learner import Learner

    return Learner(folder, LearnerConfig(**learner), lora=LORA)


def plain_state(folder) -> dict[str, torch.Tensor]:
    from prover.learning.modeling import load_model

    return load_model(folder).state_dict()


def adapters(model) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """base-model layer name -> (A, B), read off the wrapped model's parameters by their peft names."""
    params = {n.removeprefix(PEFT_MARK): p.detach().clone() for n, p in model.named_parameters()}
    layers = {n.split(".lora_A.")[0] for n in params if ".lora_A." in n}
    return {layer: (params[f"{layer}.lora_A.default.weight"], params[f"{layer}.lora_B.default.weight"])
            for layer in layers}


def by_hand(base: dict[str, torch.Tensor], factors: dict[str, tuple[torch.Tensor, torch.Tensor]]):
    """W + (alpha / r) B A for every adapted layer; every other tensor as it was."""
    out = dict(base)
    for layer, (a, b) in factors.items():
        out[f"{layer}.weight"] = base[f"{layer}.weight"] + SCALE * (b @ a)
    return out


def randomize_adapters(learner, seed: int = 0) -> None:
    """Nonzero A and B (a fresh adapter's B is 0, which would hide a missing merge)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in learner.unwrapped().named_parameters():
            if ".lora_" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))


def one_line(text: str) -> str:
    assert "\n" not in text.strip(), text
    return text


# -- settings ---------------------------------------------------------------------------------------------

def test_lora_is_off_by_default_and_every_field_is_described():
    lora = TrainConfig().model.lora
    assert lora.enabled is False
    rows = {name: text for name, _, text in field_help()}
    for field in ("enabled", "rank", "alpha", "dropout", "target_modules"):
        assert rows[f"model.lora.{field}"], field


def test_a_checkpoint_from_before_lora_existed_still_resumes(tmp_path):
    from prover.rundir.run import RUN_CONFIG, resume_differences

    cfg = TrainConfig()
    written = cfg.model_dump(mode="json")
    del written["model"]["lora"]  # what a run_config.json of an earlier prover holds
    (tmp_path / RUN_CONFIG).write_text(json.dumps(written))
    assert resume_differences(cfg, tmp_path) == []
    cfg.model.lora.enabled = True  # set away from its default, it is a change like any other
    assert resume_differences(cfg, tmp_path) == ["model.lora.enabled: '<unset>' -> True"]


@pytest.mark.parametrize("override, message", [
    ("model.lora.rank=0", "model.lora.rank"),
    ("model.lora.alpha=0", "model.lora.alpha"),
    ("model.lora.dropout=1", "model.lora.dropout"),
    ("model.lora.rnak=8", "unknown config field 'model.lora.rnak'"),
])
def test_bad_lora_settings_are_one_line_config_errors(override, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_config(None, [override])
    one_line(str(err.value))


@pytest.mark.parametrize("overrides, message", [
    (["model.lora.target_modules=[q_prj]"], "{'q_prj'} not found in the base model; the policy's linear layers are "
                                            "named q_proj, k_proj"),
    (["model.lora.target_modules=[embed_tokens]"], "'model.embed_tokens', but it is not a linear layer"),
    (["model.lora.target_modules=[lm_head]"], "'lm_head', but it shares the embedding's weight"),
])
def test_bad_targets_stop_the_run_before_its_folder_exists(overrides, message, tmp_path, capsys):
    from conftest import TINY_RUN

    run = tmp_path / "run"
    assert main(["train", *TINY_RUN, "model.lora.enabled=true", *overrides, f"run.dir={run}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not run.exists()


def test_missing_peft_is_one_line_naming_the_extra(tmp_path, capsys, monkeypatch):
    from conftest import TINY_RUN

    monkeypatch.setitem(sys.modules, "peft", None)  # `import peft` now raises ImportError
    run = tmp_path / "run"
    assert main(["train", *TINY_RUN, "model.lora.enabled=true", f"run.dir={run}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.lora.enabled=true needs peft" in err[0], err
    assert "pip install 'prover-rl[lora]'" in err[0]
    assert not run.exists()


# -- what trains ------------------------------------------------------------------------------------------

def test_only_the_adapters_train_and_the_base_stays_bit_identical(tiny_policy_dir, make_batch):
    learner = lora_learner(tiny_policy_dir, lr=1e-2)
    plain = {m: mod for m, mod in _linear_layers(tiny_policy_dir).items() if m != "lm_head"}
    expected = sum(RANK * (mod.in_features + mod.out_features) for mod in plain.values())
    named = dict(learner.unwrapped().named_parameters())
    trainable = {n for n, p in named.items() if p.requires_grad}
    assert sum(named[n].numel() for n in trainable) == expected
    assert trainable == {n for n in named if ".lora_A." in n or ".lora_B." in n}
    in_optimizer = {id(p) for group in learner.optimizer.param_groups for p in group["params"]}
    assert in_optimizer == {id(named[n]) for n in trainable}

    before = {n: p.detach().clone() for n, p in named.items()}
    batch = make_batch([[(True, 2, None), (False, 2, None)]])
    adv = Advantages(values=[[[np.full(t.n_tokens, 1.0 if tr.won else -1.0, np.float32) for t in tr.turns]
                              for tr in g.trajectories] for g in batch.groups])
    stats = learner.update(batch, adv)
    assert stats["learner/rows"] == 4 and stats["learner/updates"] == 1
    after = dict(learner.unwrapped().named_parameters())
    for n, p in after.items():
        if n in trainable:
            continue
        assert torch.equal(p, before[n]), f"{n} changed"
    # B starts at 0, so one step moves every B; A's gradient is B^T (...) = 0 on that first step
    assert all(not torch.equal(after[n], before[n]) for n in trainable if ".lora_B." in n)


def _linear_layers(folder) -> dict[str, torch.nn.Linear]:
    from prover.learning.modeling import load_model

    return {n: m for n, m in load_model(folder).named_modules() if isinstance(m, torch.nn.Linear)}


def test_the_kl_reference_is_the_base_with_adapters_off(tiny_policy_dir):
    from prover.learning.logprobs import completion_logits, gather_logprobs
    from prover.learning.modeling import load_model

    learner = lora_learner(tiny_policy_dir, kl_coef=0.1)
    assert learner.ref is None  # no second copy of the weights
    randomize_adapters(learner)
    prompts, completions = [[5, 6, 7, 8]], [[9, 10, 11]]
    with torch.no_grad(), learner._reference() as ref:
        got = gather_logprobs(*completion_logits(ref, prompts, completions, learner.pad_id)[:2])
    base = load_model(tiny_policy_dir).eval()
    with torch.no_grad():
        want = gather_logprobs(*completion_logits(base, prompts, completions, learner.pad_id)[:2])
    torch.testing.assert_close(got, want)


# -- what the engines get ---------------------------------------------------------------------------------

def test_the_hf_engine_samples_from_the_adapted_policy(tiny_policy_dir):
    from prover.engines.hf import HFEngine
    from prover.learning.logprobs import completion_logits, gather_logprobs

    learner = lora_learner(tiny_policy_dir)
    randomize_adapters(learner)
    engine, reference = HFEngine(str(tiny_policy_dir), device="cpu"), HFEngine(str(tiny_policy_dir), device="cpu")
    base = plain_state(tiny_policy_dir)
    want = by_hand(base, adapters(learner.unwrapped()))
    reference.model.load_state_dict(want)
    prompts = [[5, 6, 7, 8, 9], [20, 21, 22]]
    unadapted = [g.token_ids for g in engine.generate(prompts, GREEDY)]
    engine.update_weights(learner)
    got = engine.model.state_dict()
    assert sorted(got) == sorted(base)
    for name in got:
        torch.testing.assert_close(got[name], want[name], msg=name)
    sampled = [g.token_ids for g in engine.generate(prompts, GREEDY)]
    assert sampled == [g.token_ids for g in reference.generate(prompts, GREEDY)]
    assert sampled != unadapted  # the adapters changed what the policy says
    # the learner trains through the same distribution the engine sampled from
    completions = [s[:3] for s in sampled]
    learner.model.eval()
    with torch.no_grad():
        logits, targets, mask = completion_logits(learner.model, prompts, completions, learner.pad_id)
        mine = gather_logprobs(logits, targets)
    for i, lp in enumerate(engine.logprobs(prompts, completions)):
        np.testing.assert_allclose(lp, mine[i][mask[i]].numpy(), atol=1e-5)


@pytest.mark.slow
def test_the_sglang_engine_pushes_merged_weights_with_the_base_names(tiny_policy_dir):
    from safetensors.torch import load_file

    from prover.engines.sglang import SGLangEngine
    from sglang_server import SGLangTestServer

    learner = lora_learner(tiny_policy_dir)
    randomize_adapters(learner, seed=1)
    base = plain_state(tiny_policy_dir)
    want = by_hand(base, adapters(learner.unwrapped()))
    with SGLangTestServer(str(tiny_policy_dir), weights_readable=True) as server:  # check_weights reads back
        engine = SGLangEngine(str(tiny_policy_dir), urls=[server.url], retries=2, retry_backoff_s=0.01,
                              check_weights=True)
        engine.update_weights(learner)
        loads = [body for path, body in server.requests if path == "/update_weights_from_disk"]
        pushed = load_file(str(Path(loads[-1]["model_path"]) / "model.safetensors"))
        # every base tensor under its own name and shape (a tied LM head may be stored once), no adapter
        assert set(pushed) <= set(base) and set(base) - set(pushed) <= {"lm_head.weight"}
        assert all(pushed[n].shape == base[n].shape for n in pushed)
        served = server.model.state_dict()
        for name in ("model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight"):
            assert not torch.allclose(want[name], base[name])  # an adapted layer, changed by its adapter
            torch.testing.assert_close(pushed[name], want[name])
            torch.testing.assert_close(served[name], want[name])
        for name in ("model.embed_tokens.weight", "model.norm.weight"):
            assert torch.equal(served[name], base[name])
        engine.close()


# -- checkpoints and resume -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    """A tiny run with LoRA that trained one step."""
    from conftest import TINY_RUN

    folder = tmp_path_factory.mktemp("lora") / "run"
    assert main(["train", *TINY_RUN, "model.lora.enabled=true", f"model.lora.rank={RANK}",
                 f"model.lora.alpha={ALPHA}", "learner.lr=1e-2", f"run.dir={folder}", "steps=1"]) == 0
    return folder


@pytest.mark.slow
def test_a_checkpoint_holds_the_adapter_alone(lora_run):
    from safetensors.torch import load_file

    folder = lora_run
    ckpt = folder / "checkpoints" / "step-1"
    files = {p.name for p in ckpt.iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json"} <= files
    assert not files & {"model.safetensors", "config.json", "tokenizer.json"}
    saved = load_file(str(ckpt / "adapter_model.safetensors"))
    assert saved and all(".lora_A." in k or ".lora_B." in k for k in saved)
    assert any(float(t.abs().max()) > 0 for k, t in saved.items() if ".lora_B." in k)  # the step trained it
    [base] = (folder / "models").glob("warmstart-*")
    base_bytes = (base / "model.safetensors").stat().st_size
    ckpt_bytes = sum(p.stat().st_size for p in ckpt.iterdir())
    # a full checkpoint holds the weights and AdamW's two moments, at least 3x the base's weights; here the
    # adapter (rank 4 on 32-wide layers) is under a quarter of them, and all the rest fits below the weights
    assert (ckpt / "adapter_model.safetensors").stat().st_size < base_bytes / 4
    assert ckpt_bytes < base_bytes, (ckpt_bytes, base_bytes)


@pytest.mark.slow
def test_resume_restores_the_adapter_exactly_and_the_engine_gets_it_merged(lora_run):
    from safetensors.torch import load_file

    from prover.trainer import Trainer

    folder = lora_run
    ckpt = folder / "checkpoints" / "step-1"
    saved = load_file(str(ckpt / "adapter_model.safetensors"))
    cfg = load_config(folder / "config.yaml", [f"run.dir={folder}", "steps=2"])
    trainer = Trainer(cfg, resume=True)
    try:
        assert trainer.start_step == 1
        params = {n.removeprefix(PEFT_MARK): p for n, p in trainer.learner.unwrapped().named_parameters()}
        for key, tensor in saved.items():  # peft stores "<layer>.lora_A.weight" for adapter "default"
            name = key.removeprefix(PEFT_MARK).replace(".weight", ".default.weight")
            assert torch.equal(params[name].detach(), tensor), name
        assert {n for n, p in params.items() if p.requires_grad} == {
            k.removeprefix(PEFT_MARK).replace(".weight", ".default.weight") for k in saved}
        [base] = (folder / "models").glob("warmstart-*")
        factors = {}
        for key in saved:
            if ".lora_A." in key:
                layer = key.removeprefix(PEFT_MARK).split(".lora_A.")[0]
                factors[layer] = (saved[key], saved[key.replace(".lora_A.", ".lora_B.")])
        want = by_hand(plain_state(base), factors)
        got = trainer.engine.model.state_dict()
        for name in got:
            torch.testing.assert_close(got[name], want[name], msg=name)
        moments = trainer.learner.optimizer.state_dict()["state"].values()  # restored, and the adapters' size
        assert sum(s["exp_avg"].numel() for s in moments) == sum(t.numel() for t in saved.values())
    finally:
        trainer.close()
    assert main(["train", "--resume", f"run.dir={folder}", "steps=2"]) == 0
    assert (folder / "checkpoints" / "step-2" / "adapter_model.safetensors").is_file()
    assert json.loads((folder / "checkpoints" / "step-2" / "state.json").read_text())["step"] == 2


@pytest.mark.slow
def test_eval_of_a_lora_run_merges_its_adapter(lora_run, capsys):
    folder = lora_run
    assert main(["eval", "--run-dir", str(folder)]) == 0
    assert "success" in capsys.readouterr().out
    [merged] = (folder / "models").glob("merged-*")
    assert (merged / "config.json").is_file() and (merged / "model.safetensors").is_file()


@pytest.mark.parametrize("lora", [False, True])
def test_a_sharded_resume_points_only_to_what_the_checkpoint_can_do(lora):
    # under FSDP a resume is refused; the way out "start a new run from the checkpoint as model.path" needs a
    # full model folder, which a LoRA checkpoint (the adapter alone) is not
    from types import SimpleNamespace

    from prover.errors import CheckpointError
    from prover.system.distributed import Ranks

    cfg = TrainConfig.model_validate({"model": {"lora": {"enabled": lora}}})
    with pytest.raises(CheckpointError) as err:
        Ranks().check_learner(cfg.learner.mini_batch_rows, cfg.learner.micro_batch_rows, cfg.model.lora.enabled,
                              SimpleNamespace(distributed_type="FSDP"), resume=True)
    assert "resume with DDP" in str(err.value) and ("model.path" in str(err.value)) is not lora

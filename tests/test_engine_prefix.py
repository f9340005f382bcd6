"""The ``hf`` engine's shared prefixes within one call (``prover.engines.prefix``): the same greedy tokens and
log-probs as without sharing, the same sampling distribution, and honest prompt-token counts. The prefix
cache kept across calls is off here (``prefix_cache_mb=0``); tests/test_engine_kv_cache.py tests it.

The model is the tiny policy with its weights redrawn larger: at its own small init every prompt's next
token is near uniform and nearly the same, so a row that got another prompt's cache would go unseen.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from prover.engines import prefix
from prover.engines.hf import HFEngine
from prover.engines.prefix import MIN_COMMON_PREFIX, common_prefix_length, layout, plan_duplicates, rest_groups
from prover.envs import make_env
from prover.episodes.turn_prompts import agent_spec_for, encode_prompt
from prover.types import SamplingParams


def first_prompts(tok, env_name: str, n: int) -> list[list[int]]:
    """Turn-0 prompts of ``n`` tasks, as the rollout encodes them."""
    env = make_env(env_name)
    spec = agent_spec_for(env)
    out = []
    for seed in range(n):
        obs, info = env.reset(seed=seed, options={"split": "train"})
        out.append(encode_prompt(tok, spec.render(str(info.get("task", obs)), obs, info.get("admissible_actions"),
                                                  [], 0)))
    return out


@pytest.fixture(scope="module")
def engines(tiny_policy_dir):
    """(sharing on, sharing off), with the same sharpened weights."""
    on = HFEngine(tiny_policy_dir, device="cpu", prefix_cache_mb=0)
    off = HFEngine(tiny_policy_dir, device="cpu", share_prefixes=False)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in on.model.parameters():
            if p.dim() >= 2:  # embeddings and projections; the norms keep their ones
                p.copy_(torch.randn(p.shape, generator=g) * 2.0 / p.shape[-1] ** 0.5)
    off.model.load_state_dict(on.model.state_dict())
    assert on.sharing == "prefix" and off.sharing == "none"
    return on, off


@pytest.fixture(scope="module")
def prompts(engines):
    tok = engines[0].tokenizer
    return {"pivot": first_prompts(tok, "pivot-sim", 3), "alfworld": first_prompts(tok, "alfworld-sim", 2)}


def batch(prompts, name: str) -> list[list[int]]:
    a, b, c = prompts["pivot"]
    x, y = prompts["alfworld"]
    if name == "groups":  # two groups at turn 0 and a lone prompt, all under pivot-sim's shared header
        return [a, b, a, c, b, a, b, a]
    return [x, a, x, y, a, a]  # duplicates whose prompts share no header worth sharing


@pytest.mark.parametrize("name,mode,batch_size", [("groups", "prefix", 64), ("groups", "duplicates", 64),
                                                  ("mixed", "prefix", 64), ("groups", "prefix", 3)])
def test_greedy_generations_are_the_same_with_sharing_on_and_off(engines, prompts, name, mode, batch_size):
    on, off = engines
    on.sharing, on.batch_size = mode, batch_size
    try:
        rows = batch(prompts, name)
        params = SamplingParams(max_new_tokens=16, temperature=0.0)
        shared, plain = on.generate(rows, params), off.generate(rows, params)
        assert on.take_counts()["cost/cached_tokens"] > 0  # the shared path ran
    finally:
        on.sharing, on.batch_size = "prefix", 64
    off.take_counts()
    for s, p in zip(shared, plain):
        assert s.token_ids == p.token_ids and s.finish_reason == p.finish_reason
        np.testing.assert_allclose(s.logprobs, p.logprobs, atol=1e-5)


def test_sampled_first_tokens_follow_the_models_distribution_with_sharing_on_and_off(engines, prompts):
    """At temperature 1, each prompt's first tokens, drawn over many seeded calls, match the softmax of its own
    last logits (its top 8 tokens and the rest as 9 bins), with sharing on and off alike; and the two engines,
    drawing from different seeds, agree with each other."""
    on, off = engines
    a, b, _ = prompts["pivot"]
    per_call, calls = 30, 34  # both prompts in one chunk (batch_size 64)
    n, params = per_call * calls, SamplingParams(max_new_tokens=1, temperature=1.0)
    drawn = {}  # (engine, prompt) -> first tokens drawn
    for engine, seeds in ((on, range(calls)), (off, range(100, 100 + calls))):
        gens = [g for seed in seeds for g in engine.generate([a] * per_call + [b] * per_call, params, seed=seed)]
        for k in (0, 1):
            drawn[engine.sharing, k] = Counter(g.token_ids[0] for i, g in enumerate(gens)
                                               if (i % (2 * per_call) >= per_call) == bool(k))
    for k, prompt in enumerate((a, b)):
        with torch.no_grad():
            probs = torch.softmax(on.model(input_ids=torch.tensor([prompt])).logits[0, -1].double(), -1)
        top = probs.topk(8).indices.tolist()
        expected = np.array([probs[t].item() for t in top] + [1 - probs[top].sum().item()]) * n
        observed = {}
        for sharing in ("prefix", "none"):
            counts = [drawn[sharing, k][t] for t in top]
            observed[sharing] = np.array(counts + [n - sum(counts)])
            assert chisquare(observed[sharing], expected).pvalue > 1e-3, (sharing, k, observed[sharing], expected)
        assert np.abs(observed["prefix"] - observed["none"]).sum() / 2 / n < 0.1
    on.take_counts(), off.take_counts()


def test_counts_say_how_many_prompt_tokens_were_computed(engines, prompts):
    on, off = engines
    a, b, _ = prompts["pivot"]
    g, params = 4, SamplingParams(max_new_tokens=2, temperature=0.0)
    on.take_counts()
    on.generate([a] * g, params)  # every row the same: all but the last token once, the last on each row
    tokens = {k: v for k, v in on.take_counts().items() if not k.startswith("time/")}
    assert tokens == {"cost/prompt_tokens": g * len(a), "cost/prefill_tokens": len(a) - 1 + g,
                      "cost/cached_tokens": g * len(a) - (len(a) - 1 + g),
                      "engine/cached_ratio": pytest.approx(1 - (len(a) - 1 + g) / (g * len(a)))}
    on.generate([a] * g + [b], params)  # the header once, each distinct rest once, each last token
    lcp = common_prefix_length([a, b])
    assert lcp >= MIN_COMMON_PREFIX  # pivot-sim's prompts share a header
    computed = lcp + (len(a) - lcp - 1) + (len(b) - lcp - 1) + g + 1
    counts = on.take_counts()
    assert counts["cost/prompt_tokens"] == g * len(a) + len(b)
    assert counts["cost/cached_tokens"] == g * len(a) + len(b) - computed
    assert counts["cost/prefill_tokens"] == computed
    off.generate([a] * g + [b], params)
    assert off.take_counts()["cost/cached_tokens"] == 0
    assert on.take_counts()["cost/prompt_tokens"] == 0  # counts are since the last call


class FirstInputs:
    """A logits processor that changes nothing and keeps the token ids it was first shown."""

    def __init__(self) -> None:
        self.ids: torch.Tensor | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.ids is None:
            self.ids = input_ids.clone()
        return scores


def test_logits_processors_see_left_padded_prompts(engines, prompts):
    """With processors, a chunk still shares its header and duplicates, and the processors see its prompt
    columns left padded, as without sharing (the shared KV is laid out that way before generate)."""
    on, off = engines
    rows = batch(prompts, "groups")
    seen = FirstInputs()
    params = SamplingParams(max_new_tokens=4, temperature=0.0)
    on.generate(rows, params)
    without = on.take_counts()["cost/cached_tokens"]
    shared = on.generate(rows, params, logits_processor=lambda: [seen])
    padded, _ = layout(rows, on.pad_id)
    assert sorted(map(tuple, seen.ids[:, :padded.shape[1]].tolist())) == sorted(map(tuple, padded.tolist()))
    repeats = sum(len(r) - 1 for r in rows) - sum(len(r) - 1 for r in {tuple(r) for r in rows})
    assert on.take_counts()["cost/cached_tokens"] == without > repeats  # the header shared too
    assert [g.token_ids for g in shared] == [g.token_ids for g in off.generate(rows, params)]
    off.take_counts()


OTHER_ATTENTION = {  # models whose rows cannot take pads in the middle: a window counts columns, a state sees pads
    "sliding": {"model_type": "qwen3", "use_sliding_window": True, "sliding_window": 64, "max_window_layers": 0},
    "linear": {"model_type": "qwen3_5_text", "linear_key_head_dim": 16, "linear_value_head_dim": 16,
               "linear_num_key_heads": 2, "linear_num_value_heads": 4, "full_attention_interval": 2},
}


@pytest.mark.parametrize("kind", sorted(OTHER_ATTENTION))
def test_models_without_plain_full_attention_share_duplicates_only(tiny_policy_dir, tmp_path, kind):
    import json
    import shutil

    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    settings = dict(OTHER_ATTENTION[kind])
    if settings["model_type"] not in CONFIG_MAPPING:
        pytest.skip(f"this transformers has no {settings['model_type']}")
    for f in tiny_policy_dir.iterdir():  # the tiny policy's tokenizer, another model
        if not f.name.startswith(("config", "generation", "model")):
            shutil.copy(f, tmp_path / f.name)
    vocab = json.loads((tiny_policy_dir / "config.json").read_text())["vocab_size"]
    config = AutoConfig.for_model(settings.pop("model_type"), vocab_size=vocab,
                                  hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                  num_key_value_heads=1, head_dim=16, max_position_embeddings=4096, pad_token_id=0,
                                  **settings)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # sharper than its init, so a window or a state that saw pads shows in the log-probs
        for p in model.parameters():
            p.mul_(4.0 if p.dim() >= 2 else 1.0)
    model.save_pretrained(tmp_path)
    on, off = HFEngine(tmp_path, device="cpu"), HFEngine(tmp_path, device="cpu", share_prefixes=False)
    assert on.sharing == "duplicates" and on.prefix_cache is None  # no cache across calls either
    a, b, c = first_prompts(on.tokenizer, "pivot-sim", 3)
    rows, params = [a, b, a, c, b, a], SamplingParams(max_new_tokens=8, temperature=0.0)
    shared, plain = on.generate(rows, params), off.generate(rows, params)
    # the two extra a's and the extra b skip all but their last token; no header is shared
    assert on.take_counts()["cost/cached_tokens"] == 2 * (len(a) - 1) + (len(b) - 1)
    for s, p in zip(shared, plain):
        assert s.token_ids == p.token_ids
        np.testing.assert_allclose(s.logprobs, p.logprobs, atol=1e-5)


def test_duplicate_plans_share_only_what_saves_prefill():
    assert plan_duplicates([[1, 2, 3], [4, 5, 6]]) is None  # distinct
    plan = plan_duplicates([[1, 2], [3, 4, 5], [1, 2]])
    assert (plan.firsts, plan.inverse, plan.computed) == ([0, 1], [0, 1, 0], [2, 3, 1])
    assert plan_duplicates([[7], [7]]) is None  # one token each: generate runs it on every row anyway
    assert common_prefix_length([[1, 2, 3], [1, 2, 4, 5], [1, 2]]) == 2


def test_layout_left_pads():
    ids, attn = layout([[1, 2, 3, 4], [1, 2, 5]], pad_id=0)
    assert ids.tolist() == [[1, 2, 3, 4], [0, 1, 2, 5]] and attn.tolist() == [[1, 1, 1, 1], [0, 1, 1, 1]]


def test_share_prefixes_is_an_engine_setting():
    assert HFEngine.validate_kwargs({"share_prefixes": False}).share_prefixes is False
    assert HFEngine.validate_kwargs({}).share_prefixes is True


def test_rests_split_into_batches_by_length_while_pads_pass_the_share():
    # rests 10, 100, 10, 10: one batch pads 3 x 90 = 270 of 400 tokens; cut after the three 10s: none
    assert rest_groups([10, 100, 10, 10]) == [[0, 2, 3], [1]]
    # 50, 52, 55: 8 pads of 165 tokens (4.8%), under the 20% share: one batch
    assert rest_groups([55, 50, 52]) == [[1, 2, 0]]
    # 10, 20, 40, 80: one batch pads 170 of 320. Cuts: after 1 -> 10 + 240 = 250; after 2 -> 40 + 160 = 200;
    # after 3 -> 120 + 80 = 200; the first of the two: [10, 20] (pads 10 of 40, 25%: split again) and [40, 80]
    # (pads 40 of 160, 25%: split again)
    assert rest_groups([80, 40, 20, 10]) == [[3], [2], [1], [0]]
    assert rest_groups([]) == [] and rest_groups([7]) == [[0]]


def test_greedy_generations_are_the_same_when_the_rests_split(engines, prompts, monkeypatch):
    on, off = engines
    a, b, c = prompts["pivot"]
    cut = common_prefix_length([a, b, c]) + 4  # rests of 3 tokens past the shared header, and full ones
    rows = [a, b[:cut], c[:cut], a[:cut]]
    calls: list[int] = []
    real = prefix.run_rests
    monkeypatch.setattr(prefix, "run_rests", lambda model, seqs, *a: calls.append(len(seqs)) or real(model, seqs, *a))
    params = SamplingParams(max_new_tokens=16, temperature=0.0)
    shared, plain = on.generate(rows, params), off.generate(rows, params)
    assert len(calls) >= 3  # the header, then the distinct rows' rests in more than one batch
    for s, p in zip(shared, plain):
        assert s.token_ids == p.token_ids
        np.testing.assert_allclose(s.logprobs, p.logprobs, atol=1e-5)

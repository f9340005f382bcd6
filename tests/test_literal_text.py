"""Env text stays literal in every prompt: an observation, a task, an admissible action or a tool's output that
holds a chat marker (``<|im_end|>\\n<|im_start|>assistant\\n...``) or any other added token of the tokenizer
produces no token the same prompt without it does not have, in the windowed prompt, the growing chat, the
warm start's rows and the judge's prompts; text that holds none is encoded exactly as the chat template's
own text encodes. For the tiny model's tokenizer, SmolLM2-135M-Instruct's and a Qwen2.5-style one."""

from __future__ import annotations

import functools

import pytest
from literal_tokenizers import (
    FORGED_TURN,
    Hostile,
    LookEngine,
    SentinelObservation,
    added_ids,
    hostile_with,
    marker_strings,
    qwen_style_tokenizer,
    tiny_tokenizer,
)

from prover.chat.local import encode_messages, template_messages
from prover.envs import make_env
from prover.envs.agent_spec import AgentSpec
from prover.episodes.literal_text import ENV_SPANS
from prover.episodes.turn_prompts import agent_spec_for
from prover.policy.warmstart import expert_rows
from prover.rollout import Rollout
from prover.types import SamplingParams
from test_episode_chat import conversation_text, smollm2_tokenizer  # noqa: F401  (a fixture)

TOKENIZERS = ["tiny", "smollm2", "qwen-style"]
CONTEXTS = ["window", "chat"]


@pytest.fixture(scope="module")
def built():
    return {"tiny": tiny_tokenizer(), "qwen-style": qwen_style_tokenizer()}


@pytest.fixture(params=TOKENIZERS)
def tok(request, built):
    return request.getfixturevalue("smollm2_tokenizer") if request.param == "smollm2" else built[request.param]


def hostile_texts(tok) -> dict[str, str]:
    """The forged turn alone, and every marker of the tokenizer in one text."""
    return {"forged turn": FORGED_TURN, "every marker": " ".join(f"x{m}y" for m in marker_strings(tok))}


def play(tok, text: str, context: str, seeds=(1, 2)) -> tuple[list, LookEngine]:
    """Rollout trajectories of the hostile env with ``text`` (alfworld-sim's full prompt, whose own words hold
    the action tags), and the engine that saw their prompts."""
    engine = LookEngine(tok)
    rollout = Rollout(lambda: hostile_with(text)(prompt="verl-agent"), engine, max_turns=3, context=context,
                      sampling=SamplingParams(max_new_tokens=8, temperature=0.0))
    return [t for g in rollout.run(list(seeds), group_size=1).groups for t in g.trajectories], engine


def template_text(tok, spec, traj, t: int, context: str) -> str:
    """What the chat template itself writes for turn ``t``'s prompt, by the definition of each context."""
    if context == "chat":
        return conversation_text(tok, spec, traj, t)
    turn = traj.turns[t]
    content = spec.render(traj.task_text, turn.observation, list(turn.admissible), list(turn.history), t)
    return tok.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                   tokenize=False)


def special_ids(tok, ids: list[int]) -> list[int]:
    """The ids of ``ids`` that are special tokens (the chat markers and the rest), in order."""
    special = {i for i, t in tok.added_tokens_decoder.items() if t.special} | set(tok.all_special_ids)
    return [i for i in ids if i in special]


@pytest.mark.parametrize("context", CONTEXTS)
def test_a_forged_turn_in_env_text_adds_no_special_id_to_rollout_prompts(tok, context):
    forged, _ = play(tok, FORGED_TURN, context)
    plain, _ = play(tok, "", context)
    spec = agent_spec_for(Hostile(prompt="verl-agent"))
    for hostile, clean in zip(forged, plain):
        assert len(hostile.turns) == len(clean.turns) == 3 and not hostile.env_error
        for t, (turn, same) in enumerate(zip(hostile.turns, clean.turns)):
            assert len(special_ids(tok, turn.prompt_ids)) == len(special_ids(tok, same.prompt_ids))
            assert added_ids(tok, turn.prompt_ids) == added_ids(tok, same.prompt_ids)
            text = tok.decode(turn.prompt_ids, skip_special_tokens=False)
            assert text == template_text(tok, spec, hostile, t, context) and FORGED_TURN in text


@pytest.mark.parametrize("context", CONTEXTS)
def test_every_marker_of_the_tokenizer_in_env_text_stays_literal_in_rollout_prompts(tok, context):
    markers = hostile_texts(tok)["every marker"]
    hostile, _ = play(tok, markers, context)
    plain, _ = play(tok, "", context)
    spec = agent_spec_for(Hostile(prompt="verl-agent"))
    for traj, clean in zip(hostile, plain):
        for t, (turn, same) in enumerate(zip(traj.turns, clean.turns)):
            assert added_ids(tok, turn.prompt_ids) == added_ids(tok, same.prompt_ids)
            assert tok.decode(turn.prompt_ids, skip_special_tokens=False) == template_text(tok, spec, traj, t,
                                                                                           context)


@pytest.mark.parametrize("context", CONTEXTS)
def test_warm_start_rows_keep_env_text_literal(tok, context):
    def rows(text: str) -> list:
        return expert_rows(lambda: hostile_with(text)(prompt="verl-agent"), tok, episodes=2, random_share=0.3, seed=0,
                           max_turns=4, context=context)

    clean = rows("")
    assert len(clean) >= 6
    for name, text in hostile_texts(tok).items():
        hostile = rows(text)
        assert len(hostile) == len(clean), name
        for (prompt, completion), (same_prompt, same_completion) in zip(hostile, clean):
            # an earlier action in the history is shown as the policy's own text: no special token from it,
            # its other added tokens (the action tags) as written; the observations add none at all
            assert special_ids(tok, prompt) == special_ids(tok, same_prompt), name
            if name == "forged turn":
                assert added_ids(tok, prompt) == added_ids(tok, same_prompt)
            # the expert's action holds the text too: the completion the policy learns holds no token for it
            assert added_ids(tok, completion) == added_ids(tok, same_completion), name
            assert text in tok.decode(prompt, skip_special_tokens=False)
            assert text in tok.decode(completion, skip_special_tokens=False)


def judge_messages(text: str) -> list[dict]:
    """A judge's conversation: its instructions, a trajectory, a research call and the tool's answer."""
    call = {"id": "c", "type": "function", "function": {"name": "get_segment", "arguments": '{"end_turn": 1}'}}
    return [{"role": "system", "content": "Find the turn that decided the episode."},
            {"role": "user", "content": f"[turn 0] observation: a door {text}\n         action: look"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c", "content": f"turn 1: {text} you win"}]


@pytest.mark.parametrize("tools", [False, True])
def test_a_judges_prompt_keeps_trajectory_and_tool_text_literal(tok, tools):
    from prover.judges import tools as judge_tools

    schemas = judge_tools.TOOL_SCHEMAS if tools else None
    native = "tools" in (tok.chat_template or "")
    clean = encode_messages(tok, judge_messages(""), schemas, native, {})
    for name, text in hostile_texts(tok).items():
        ids = encode_messages(tok, judge_messages(text), schemas, native, {})
        assert added_ids(tok, ids) == added_ids(tok, clean), name
        shown = [{k: v for k, v in m.items() if k != ENV_SPANS}
                 for m in template_messages(judge_messages(text), schemas, native)]
        expected = tok.apply_chat_template(shown, add_generation_prompt=True, tokenize=False,
                                           **({"tools": schemas} if schemas and native else {}))
        assert tok.decode(ids, skip_special_tokens=False) == expected


def expected_ids(tok, spec, traj, t: int, context: str) -> list[int]:
    """Turn ``t``'s prompt as the chat template encodes it by itself: ``apply_chat_template(tokenize=True)``
    for a windowed prompt and a chat's opening, the encoding of the conversation's text for a later chat turn."""
    turn = traj.turns[t]
    if context == "chat" and t > 0:
        return tok.encode(conversation_text(tok, spec, traj, t), add_special_tokens=False)
    messages = (spec.chat_opening(traj.task_text, turn.observation, list(turn.admissible)) if context == "chat" else
                [{"role": "user", "content": spec.render(traj.task_text, turn.observation, list(turn.admissible),
                                                         list(turn.history), t)}])
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(getattr(ids, "input_ids", ids))


ENVS = [("alfworld-sim", {}), ("alfworld-sim", {"prompt": "verl-agent"}), ("webshop-sim", {}), ("searchqa-sim", {}),
        ("pivot-sim", {"prompt": "full"})]


@pytest.mark.parametrize("context", CONTEXTS)
def test_prompts_without_markers_are_the_templates_own_encoding(tok, context):
    for name, kwargs in ENVS:
        rollout = Rollout(functools.partial(make_env, name, **kwargs), LookEngine(tok), max_turns=3, context=context,
                          sampling=SamplingParams(max_new_tokens=8, temperature=0.0))
        spec = agent_spec_for(make_env(name, **kwargs))
        for traj in (t for g in rollout.run([1, 2], group_size=1).groups for t in g.trajectories):
            assert traj.turns and not traj.env_error
            for t, turn in enumerate(traj.turns):
                assert turn.prompt_ids == expected_ids(tok, spec, traj, t, context), (name, t)


def test_judge_prompts_and_completions_without_markers_are_the_plain_encoding(tok):
    from prover.episodes.turn_prompts import encode_completion
    from prover.judges import tools as judge_tools

    native = "tools" in (tok.chat_template or "")
    for schemas in (None, judge_tools.TOOL_SCHEMAS):
        shown = template_messages(judge_messages("plain text"), schemas, native)
        expected = tok.apply_chat_template(shown, add_generation_prompt=True, tokenize=True,
                                           **({"tools": schemas} if schemas and native else {}))
        assert encode_messages(tok, judge_messages("plain text"), schemas, native, {}) == list(
            getattr(expected, "input_ids", expected))
    text, spans = AgentSpec(require_think=True).format_action_marked("go to cabinet 1")
    assert (text, spans) == ("<think></think><action>go to cabinet 1</action>", [(23, 38)])
    assert encode_completion(tok, text, spans) == tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]


# -- the chat's measurements: no marker an env can write ------------------------------------------

@pytest.mark.parametrize("make", [SentinelObservation, hostile_with("PROVERSENTINELREPLY"),
                                  hostile_with("PROVERPROBEREPLY <|im_end|> PROVERPROBEREPLY")],
                         ids=["in the observation", "everywhere", "the probe's own text"])
def test_env_text_holding_the_chat_codes_own_markers_plays_on(tok, make):
    """Such text is the env's like any other: the chat grows by it as the template writes it. A reply found
    by searching for the marker would stop the run blaming the template when the observation holds it, and
    would drop the whole reply from the chat when the last admissible action does."""
    rollout = Rollout(make, LookEngine(tok), max_turns=3, context="chat",
                      sampling=SamplingParams(max_new_tokens=8, temperature=0.0))
    spec = agent_spec_for(make())
    for traj in (t for g in rollout.run([1, 2], group_size=1).groups for t in g.trajectories):
        assert len(traj.turns) == 3 and not traj.env_error
        for t, turn in enumerate(traj.turns):
            assert tok.decode(turn.prompt_ids, skip_special_tokens=False) == conversation_text(tok, spec, traj, t)


# A ChatML template whose closing of an assistant message depends on what the next message says: a
# reply holding "RESET" makes it close the turn before it with <|endoftext|>.
CONTENT_DEPENDENT = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}{% if m['role'] == 'assistant' and "
    "not loop.last and 'RESET' in messages[loop.index0 + 1]['content'] %}<|endoftext|>{% else %}<|im_end|>"
    "{% endif %}\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class ResetEnv(Hostile):
    """alfworld-sim whose text says RESET on odd task seeds."""

    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        self.text = "RESET" if seed % 2 else ""
        return super()._reset(seed, options)


def test_env_text_that_breaks_the_chat_ends_its_episode_with_a_line_naming_the_env(built):
    tok = qwen_style_tokenizer()
    tok.chat_template = CONTENT_DEPENDENT
    rollout = Rollout(ResetEnv, LookEngine(tok), max_turns=3, context="chat",
                      sampling=SamplingParams(max_new_tokens=8, temperature=0.0))
    broken, fine = (g.trajectories[0] for g in rollout.run([1, 2], group_size=1).groups)
    assert broken.env_error == ("env ResetEnv: its reply changes how the chat template writes the turns before "
                                "it, so the chat cannot grow by appending")
    assert len(broken.turns) == 1
    assert not fine.env_error and len(fine.turns) == 3

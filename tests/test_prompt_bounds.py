"""No observation can hang the trainer: every prompt fits the model's positions.

The policy under test (prover/rollout.py): the oldest history entries go first, then the observation's
end is cut with a mark, and a prompt that still cannot fit ends its episode as an env error naming the
sizes; ``max_new_tokens`` plus the prompt budget is checked against the model's positions when the
config loads. The hand-worked cases use a character tokenizer, so a prompt's length is its text's.
"""

from __future__ import annotations

import json

import pytest

from conftest import TINY_RUN
from prover.envs.agent_spec import AgentSpec
from prover.envs.alfworld_sim.env import AlfworldSimEnv
from prover.episodes.turn_prompts import CHARS_PER_TOKEN, bounded_text, fit_prompt, prompt_budget
from prover.errors import ConfigError

MEGABYTE_OBSERVATION = "you see a cabinet 1, a drawer 2 and a countertop 3. " * 20_000  # 1.04 MB

SPEC = AgentSpec(first_template="T:{task} O:{observation}", later_template="T:{task} H:{history} O:{observation}",
                 history_entry="[{observation}>{action}]", history_window=2)
HISTORY = [("aa", "x"), ("bb", "y")]


def mark(keep: int, total: int) -> str:
    return f" [... cut to fit the prompt: {keep} of {total} characters shown]"


@pytest.fixture(scope="module")
def chars():
    """A real fast tokenizer with one token per character and a chat template that adds nothing."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {chr(c): i for i, c in enumerate(range(32, 127))} | {"\n": 95, "<eos>": 96}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")
    fast.chat_template = "{{ messages[0]['content'] }}"
    return fast


def text_of(chars, ids):
    return chars.decode(ids)


def test_a_prompt_within_the_budget_is_the_specs_own(chars):
    full = "T:t H:[aa>x]\n[bb>y] O:ccc"  # 25 characters
    ids, why = fit_prompt(chars, SPEC, "t", "ccc", None, HISTORY, 2, budget=25)
    assert (text_of(chars, ids), why) == (full, "")
    assert fit_prompt(chars, SPEC, "t", "ccc", None, HISTORY, 2, budget=None)[0] == ids


def test_the_oldest_history_entry_goes_first_then_the_rest(chars):
    ids, _ = fit_prompt(chars, SPEC, "t", "ccc", None, HISTORY, 2, budget=24)
    assert text_of(chars, ids) == "T:t H:[bb>y] O:ccc"  # 18: the newest entry stays
    ids, _ = fit_prompt(chars, SPEC, "t", "ccc", None, HISTORY, 2, budget=17)
    assert text_of(chars, ids) == "T:t O:ccc"  # 9: no history, the observation whole


def test_then_the_observations_end_is_cut_and_marked(chars):
    obs = "c" * 500
    budget = 200
    # by hand: "T:t O:" (6) + k characters + the mark for k of 500; the largest k that fits 200
    best = max(k for k in range(501) if 6 + k + len(mark(k, 500)) <= budget)
    ids, why = fit_prompt(chars, SPEC, "t", obs, None, HISTORY, 2, budget=budget)
    assert why == "" and len(ids) <= budget
    assert text_of(chars, ids) == "T:t O:" + "c" * best + mark(best, 500)


def test_a_prompt_that_cannot_fit_says_its_sizes(chars):
    ids, why = fit_prompt(chars, SPEC, "t" * 300, "ccc", ["go"] * 5, HISTORY, 2, budget=200)
    assert ids is None
    bare = len("T:" + "t" * 300 + " O:" + mark(0, 0))
    assert why == (f"the prompt cannot fit rollout.max_prompt_tokens=200: {bare} tokens with no history and no "
                   "observation (300-character task, 5 admissible actions; the observation has 3 characters)")


def test_text_entering_the_rollout_is_cut_to_what_a_prompt_could_show():
    assert bounded_text("abc", 1) == "abc" and bounded_text("x" * 10**6, None) == "x" * 10**6
    cut = bounded_text(MEGABYTE_OBSERVATION, 100)
    assert cut == MEGABYTE_OBSERVATION[:CHARS_PER_TOKEN * 100] + mark(800, len(MEGABYTE_OBSERVATION))


@pytest.mark.parametrize("given, new, positions, budget", [
    (None, 24, 4096, 4072), (512, 24, 4096, 512), (4072, 24, 4096, 4072), (None, 24, None, None), (64, 24, None, 64),
])
def test_the_prompt_budget(given, new, positions, budget):
    assert prompt_budget(given, new, positions) == budget


@pytest.mark.parametrize("overrides, message", [
    (["rollout.sampling.max_new_tokens=100000"],
     "rollout.sampling.max_new_tokens=100000 leaves no room for a prompt in the model's 4096 positions"),
    (["rollout.sampling.max_new_tokens=4080"],
     "rollout.sampling.max_new_tokens=4080 leaves no room for a prompt in the model's 4096 positions"),
    (["rollout.max_prompt_tokens=4000", "rollout.sampling.max_new_tokens=200"],
     "rollout.max_prompt_tokens=4000 plus rollout.sampling.max_new_tokens=200 is 4200 tokens, more than the "
     "model's 4096 positions"),
])
def test_sizes_past_the_models_positions_fail_when_the_config_loads(overrides, message, tmp_path, capsys):
    from prover.cli import main
    from prover.config_load import load_config

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(overrides=overrides)
    run = tmp_path / "run"
    assert main(["train", *overrides, f"run.dir={run}"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and not run.exists()


def test_a_checkpoints_own_positions_bound_it(tmp_path):
    from prover.config_load import load_config

    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"max_position_embeddings": 512}}))
    with pytest.raises(ConfigError, match="more than the model's 512 positions"):
        load_config(overrides=[f"model.path={tmp_path}", "rollout.max_prompt_tokens=500"])
    assert load_config(overrides=[f"model.path={tmp_path}", "rollout.max_prompt_tokens=488"])


class HugeObservations(AlfworldSimEnv):
    """alfworld-sim whose second observation is 1 MB, and whose task is 1 MB on task seed 424242."""

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        if seed == 424242:
            info = {**info, "task": MEGABYTE_OBSERVATION}
        return obs, info

    def step(self, action):
        obs, reward, term, trunc, info = super().step(action)
        return obs + "\n" + MEGABYTE_OBSERVATION, reward, term, trunc, info


@pytest.fixture(scope="module")
def tiny_engine(tiny_policy_dir):
    from prover.engines.hf import HFEngine

    return HFEngine(tiny_policy_dir)


def test_a_megabyte_observation_is_cut_in_rollouts_branches_and_evaluation(tiny_engine):
    from prover.config_load import load_config
    from prover.episodes.branching import Brancher, BranchRequest
    from prover.trainer import build_rollout, evaluate_policy

    cfg = load_config(overrides=["rollout.max_turns=3", "rollout.sampling.max_new_tokens=8", "eval.episodes=2"])
    rollout = build_rollout(cfg, tiny_engine, HugeObservations)
    assert rollout.max_prompt_tokens == 4096 - 8  # the model's positions less max_new_tokens
    rollout.max_prompt_tokens = 300  # a small budget keeps the test fast; the policy is the same
    batch = rollout.run([3], group_size=2, seed=1, record_snapshots=True)
    for traj in batch.groups[0].trajectories:
        assert not traj.env_error and len(traj.turns) >= 2
        assert all(len(t.prompt_ids) <= 300 for t in traj.turns)
        shown = tiny_engine.tokenizer.decode(traj.turns[1].prompt_ids)
        assert "[... cut to fit the prompt:" in shown and "Recent history" not in shown  # history went first
        assert len(traj.turns[1].observation) <= CHARS_PER_TOKEN * 300 + 100  # kept small where it entered
    traj = batch.groups[0].trajectories[0]
    [result] = Brancher(rollout).continue_from([BranchRequest(traj, 1, 1)], seed=2)
    assert result.trajectories[0].turns[1].prompt_ids == traj.turns[1].prompt_ids  # the branch saw the same prompt
    record, evaluated = evaluate_policy(cfg, rollout)
    assert record["eval/episodes"] == 2.0
    assert all(len(t.prompt_ids) <= 300 for g in evaluated.groups for tr in g.trajectories for t in tr.turns)


def test_a_prompt_that_cannot_fit_ends_its_episode_as_an_env_error(tiny_engine):
    from prover.rollout import Rollout
    from prover.types import SamplingParams

    rollout = Rollout(HugeObservations, tiny_engine, max_turns=3, sampling=SamplingParams(max_new_tokens=8),
                      max_prompt_tokens=300)
    batch = rollout.run([5, 424242], group_size=1, seed=1)
    fine, huge = (g.trajectories[0] for g in batch.groups)
    assert not fine.env_error and fine.turns
    assert huge.turns == [] and huge.env_error.startswith("the prompt cannot fit rollout.max_prompt_tokens=300: ")
    assert f"({CHARS_PER_TOKEN * 300 + len(mark(2400, len(MEGABYTE_OBSERVATION)))}-character task" in huge.env_error


@pytest.mark.slow
def test_prover_train_on_megabyte_observations_finishes_with_bounded_prompts(tmp_path, capsys):
    from prover.cli import main

    run = tmp_path / "run"
    args = ["train", *TINY_RUN, "steps=1", "env.name=test_prompt_bounds:HugeObservations", f"run.dir={run}",
            "rollout.max_prompt_tokens=1024", "rollout.max_turns=3", "warmstart.episodes=4", "eval.episodes=2"]
    assert main(args) == 0, capsys.readouterr().err
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = next(r for r in records if r["phase"] == "train")
    assert train["rollout/env_errors"] == 0.0 and train["rollout/turns"] >= 2

"""The contrast judge on hand-built groups whose answer is known by construction, and, over random
groups, that every proposal is valid, at most L turns, deterministic, and ends where the success
breaks away from the failed runs (the definition in prover/judges/contrast.py). Then alignment by
observation text: the break-away rule in text parts from contrast where states and texts do not match one
to one, agrees with it where they do, and never reads state_key; and text-contrast's own rule
(``rule="frequency"``, step 5), on hand-built groups whose answer is worked out in each test."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prover.config_load import load_config
from prover.errors import ConfigError
from prover.judges import make_judge, validate_segment
from prover.judges.contrast import ContrastJudge, ContrastSettings, TextContrastJudge, TextContrastSettings
from prover.types import Group, JudgeRequest, Segment, Trajectory, Turn


def traj(name: str, steps: list[tuple], won: bool = False) -> Trajectory:
    """``steps``: (state_key, action) or (state_key, action, valid) per turn."""
    turns = []
    for t, (state, action, *valid) in enumerate(steps):
        ok = valid[0] if valid else True
        turns.append(Turn(prompt_ids=[t], completion_ids=[1, 2], logprobs=[-0.1, -0.1], observation=str(state),
                          completion_text=action, action=action, format_valid=True, action_valid=ok,
                          reward=1.0 if won and t == len(steps) - 1 else 0.0, state_key=state))
    return Trajectory(name, "task", "put a mug in the sink", turns=turns, won=won)


def ask(success: Trajectory, *failures: Trajectory, max_turns: int = 4, **settings_) -> Segment | None:
    request = JudgeRequest(Group("task", [success, *failures]), target=0, max_turns=max_turns)
    result = ContrastJudge(ContrastSettings(**settings_)).propose(request)
    if result.proposal is not None:
        assert validate_segment(request, result.proposal.segment) is None
        assert result.usage.calls == 0 and result.usage.dollars == 0.0  # free
    return result.proposal.segment if result.proposal else None


# The failed runs of most cases below: from A both went elsewhere; F1 reached B and did not take the mug.
F1 = traj("F1", [("A", "go to counter 1"), ("B", "go to shelf 2"), ("C", "look")])
F2 = traj("F2", [("A", "go to cabinet 3"), ("G", "go to counter 1"), ("B", "open drawer 1")])


def test_one_new_action_at_a_shared_state_is_the_window():
    # S walks the failed runs' path to B, then takes the mug (neither did at B) and never returns
    s = traj("S", [("A", "go to counter 1"), ("B", "take mug"), ("D", "go to sink"), ("E", "put mug in sink")], True)
    assert ask(s, F1, F2) == Segment("S", 1, 1)


def test_an_early_divergence_that_rejoins_the_failed_runs_is_not_the_window():
    # S's first move is new at A (no failed run took it), but it lands in G, where F2 stood; it then
    # does what F2 did at G, reaches B, and breaks away there by taking the mug
    s = traj("S", [("A", "go to fridge 1"), ("G", "go to counter 1"), ("B", "take mug"), ("D", "go to sink"),
                   ("E", "put mug in sink")], True)
    assert ask(s, F1, F2) == Segment("S", 2, 2)


def test_actions_compare_without_case_or_spacing():
    s = traj("S", [("A", "Go to  Counter 1"), ("B", "take mug"), ("D", "put mug in sink")], True)
    assert ask(s, F1, F2) == Segment("S", 1, 1)  # turn 0 is F1's action, written differently


def test_the_state_after_a_failed_runs_last_turn_counts_as_reached():
    # F ran out of turns after "look" at C; S makes that same move, so the state it reaches (X) is one F
    # stood in at its end. S's own new decision is what it does there.
    f = traj("F", [("A", "go to counter 1"), ("B", "go to shelf 2"), ("C", "look")])
    s = traj("S", [("A", "go to counter 1"), ("B", "go to shelf 7"), ("C", "look"), ("X", "take mug"),
                   ("Y", "go to sink"), ("Z", "put mug in sink")], True)
    assert ask(s, f) == Segment("S", 3, 3)


# F's "open drawer 1" at B led to C; S's same move led to D (a state key that leaves something out, or
# chance): S breaks away after turn 1 by a move F also made, and its last new decision was turn 0.
F3 = traj("F3", [("A", "go to counter 1"), ("B", "open drawer 1"), ("C", "look"), ("C", "look")])


def test_a_break_away_by_a_shared_move_reaches_back_to_the_last_divergence_within_l():
    s = traj("S", [("A", "go to shelf 2"), ("B", "open drawer 1"), ("D", "take mug"), ("E", "put mug in sink")],
             True)
    assert ask(s, F3) == Segment("S", 0, 1)
    assert ask(s, F3, max_turns=1) == Segment("S", 1, 1)  # L cuts it from the left, keeping the break-away


def test_a_rejected_action_inside_the_window_cuts_it():
    s = traj("S", [("A", "go to counter 1"), ("B", "kick drawer", False), ("B", "open drawer 1"), ("D", "take mug"),
                   ("E", "put mug in sink")], True)
    assert ask(s, F3) == Segment("S", 2, 2)  # the window from the divergence (turn 1) holds a rejected action


def test_break_away_only_at_the_final_turn_falls_back_to_the_approach():
    # S stands only in states the failed runs stood in; only its final (winning) action is new
    s = traj("S", [("A", "go to counter 1"), ("B", "go to shelf 2"), ("C", "put mug in sink")], True)
    assert ask(s, F1) == Segment("S", 0, 1)  # the last L valid turns before the final one
    assert ask(s, F1, max_turns=1) == Segment("S", 1, 1)
    assert ask(s, F1, fallback="none") is None


def test_nothing_to_contrast_gives_no_proposal():
    s = traj("S", [("A", "go to counter 1"), ("B", "take mug"), ("D", "put mug in sink")], True)
    request = JudgeRequest(Group("task", [s, traj("F", [])]), target=0)
    result = ContrastJudge().propose(request)
    assert result.proposal is None and "no failed run" in result.failure
    one_turn = traj("S", [("A", "put mug in sink")], True)
    assert ask(one_turn, F1) is None


def test_settings_are_checked_as_one_line_config_errors():
    assert isinstance(make_judge(load_config(None, ["judge.name=contrast"])), ContrastJudge)
    for bad, text in ((["judge.fallback=sometimes"], "judge.fallback"), (["judge.bogus=1"], "judge.bogus")):
        with pytest.raises(ConfigError) as err:
            load_config(None, ["judge.name=contrast", *bad])
        assert text in str(err.value) and "\n" not in str(err.value)


# -- properties over random groups --------------------------------------------------------------

STATES = st.sampled_from(["A", "B", "C", "D", "E"])
ACTIONS = st.sampled_from(["go 1", "go 2", "take", "open"])
STEP = st.tuples(STATES, ACTIONS, st.booleans())


@settings(max_examples=300, deadline=None)
@given(st.lists(STEP, min_size=1, max_size=8), st.lists(st.lists(STEP, max_size=8), min_size=1, max_size=4),
       st.integers(1, 4))
def test_random_groups_give_valid_deterministic_break_away_windows(success_steps, failed_steps, max_turns):
    s = traj("S", [("A", a, v) for _, a, v in success_steps[:1]] + success_steps[1:], True)
    failures = [traj(f"F{j}", [("A", a, v) for _, a, v in steps[:1]] + steps[1:])
                for j, steps in enumerate(failed_steps)]
    request = JudgeRequest(Group("task", [s, *failures]), target=0, max_turns=max_turns)
    first, again = ContrastJudge().propose(request), ContrastJudge().propose(request)
    assert first == again
    if first.proposal is None:
        return
    seg = first.proposal.segment
    assert validate_segment(request, seg) is None
    if first.proposal.rationale.startswith("break-away"):
        keys = [turn.state_key for turn in s.turns]
        visited = {turn.state_key for f in failures for turn in f.turns}
        last_moves = {(f.turns[-1].state_key, f.turns[-1].action) for f in failures if f.turns}
        visited |= {keys[t + 1] for t in range(len(keys) - 1) if (keys[t], s.turns[t].action) in last_moves}
        # the window ends at the last turn that starts from a state a failed run stood in
        assert keys[seg.end_turn] in visited and not visited & set(keys[seg.end_turn + 1:])


# -- text-contrast: the same rule, aligned by what the agent saw ------------------------------------

def seen(name: str, steps: list[tuple[object, str, str]], won: bool = False) -> Trajectory:
    """``steps``: (state_key, observation text, action) per turn; the text need not follow the state."""
    turns = [Turn(prompt_ids=[t], completion_ids=[1, 2], logprobs=[-0.1, -0.1], observation=text,
                  completion_text=action, action=action, format_valid=True, action_valid=True,
                  reward=1.0 if won and t == len(steps) - 1 else 0.0, state_key=state)
             for t, (state, text, action) in enumerate(steps)]
    return Trajectory(name, "task", "put a mug in the sink", turns=turns, won=won)


def ask_named(name: str, success: Trajectory, *failures: Trajectory, **settings_) -> Segment | None:
    """Judge ``name`` with its own settings; text-contrast keeps the break-away rule unless told otherwise,
    so that the alignment tests below compare one rule under two alignments."""
    from prover.registry import JUDGES

    request = JudgeRequest(Group("task", [success, *failures]), target=0, max_turns=4)
    cls = JUDGES.get(name)
    if name == "text-contrast":
        settings_.setdefault("rule", "break-away")
    result = cls(cls.Config(**settings_)).propose(request)
    return result.proposal.segment if result.proposal else None


# F: at A (text "kitchen") it went to the counter, reached B ("Nothing happens."), opened a drawer there
F_TEXT = seen("F", [("A", "kitchen", "go to counter 1"), ("B", "Nothing happens.", "open drawer 1"),
                    ("C", "drawer open", "look")])


def test_two_states_behind_one_text_split_contrast_from_text_contrast():
    # S's turn 1 is in state Q, which no failed run stood in, but it shows F's text at B.
    # state: aligned turns {0}; S's "go to shelf 1" at A is new -> d = e = 0 -> [0, 0].
    # text: aligned {0, 1}; "take mug" after "nothing happens." is new (F opened a drawer) -> [1, 1].
    s = seen("S", [("A", "kitchen", "go to shelf 1"), ("Q", "Nothing happens.", "take mug"),
                   ("D", "you hold a mug", "go to sink"), ("E", "at the sink", "put mug in sink")], True)
    assert ask_named("contrast", s, F_TEXT) == Segment("S", 0, 0)
    assert ask_named("text-contrast", s, F_TEXT) == Segment("S", 1, 1)


def test_one_state_behind_two_texts_splits_them_the_other_way():
    # S stands in B like F, but is shown another text there.
    # state: aligned {0, 1}; turn 0 repeats F, "take mug" at B is new -> [1, 1].
    # text: aligned {0} only; turn 0 is no divergence, so the window is the break-away turn alone -> [0, 0].
    s = seen("S", [("A", "kitchen", "go to counter 1"), ("B", "You see a drawer 1.", "take mug"),
                   ("D", "you hold a mug", "go to sink"), ("E", "at the sink", "put mug in sink")], True)
    assert ask_named("contrast", s, F_TEXT) == Segment("S", 1, 1)
    assert ask_named("text-contrast", s, F_TEXT) == Segment("S", 0, 0)


class Untouchable:
    """A state key that fails every use but being stored: hashing, comparing, printing, truth."""

    def _read(self, *args):
        raise AssertionError("state_key was read")

    __hash__ = __eq__ = __ne__ = __repr__ = __str__ = __bool__ = _read


def test_text_contrast_never_reads_state_key():
    steps_f = [(Untouchable(), text, action) for _, text, action in
               [("A", "kitchen", "go to counter 1"), ("B", "Nothing happens.", "open drawer 1"), ("C", "x", "look")]]
    steps_s = [(Untouchable(), text, action) for _, text, action in
               [("A", "kitchen", "go to shelf 1"), ("Q", "Nothing happens.", "take mug"),
                ("D", "you hold a mug", "go to sink"), ("E", "at the sink", "put mug in sink")]]
    s, f = seen("S", steps_s, True), seen("F", steps_f)
    assert ask_named("text-contrast", s, f) == Segment("S", 1, 1)  # as in the two-states case above
    with pytest.raises(AssertionError, match="state_key was read"):  # the sentinel does catch a reader
        ask_named("contrast", s, f)


def test_text_contrast_from_config_and_its_align_is_fixed():
    from prover.registry import JUDGES

    judge = make_judge(load_config(None, ["judge.name=text-contrast"]))
    assert isinstance(judge, JUDGES.get("text-contrast")) and judge.config.align == "text"
    assert make_judge(load_config(None, ["judge.name=contrast", "judge.align=text"])).config.align == "text"
    with pytest.raises(ConfigError) as err:
        load_config(None, ["judge.name=text-contrast", "judge.align=state"])
    assert "judge.align" in str(err.value) and "\n" not in str(err.value)


@settings(max_examples=100, deadline=None)
@given(st.lists(STEP, min_size=1, max_size=8), st.lists(st.lists(STEP, max_size=8), min_size=1, max_size=4),
       st.integers(1, 4))
def test_text_contrast_agrees_with_contrast_when_each_state_has_its_own_text(success_steps, failed_steps,
                                                                            max_turns):
    # traj() shows str(state) as the observation: text and state identify each other one to one
    s = traj("S", [("A", a, v) for _, a, v in success_steps[:1]] + success_steps[1:], True)
    failures = [traj(f"F{j}", [("A", a, v) for _, a, v in steps[:1]] + steps[1:])
                for j, steps in enumerate(failed_steps)]
    request = JudgeRequest(Group("task", [s, *failures]), target=0, max_turns=max_turns)
    from prover.registry import JUDGES

    text_break_away = JUDGES.get("text-contrast")(TextContrastSettings(rule="break-away"))
    assert text_break_away.propose(request) == ContrastJudge().propose(request)


# -- text-contrast's rule: the action most typical of winning, least of failing (step 5) ----------------

def ask_frequency(*trajectories: Trajectory, **settings_) -> tuple[Segment | None, str]:
    """text-contrast with its defaults on a group whose first trajectory is the success asked about."""
    request = JudgeRequest(Group("task", list(trajectories)), target=0, max_turns=4)
    result = TextContrastJudge(TextContrastSettings(**settings_)).propose(request)
    if result.proposal is None:
        return None, result.failure
    assert validate_segment(request, result.proposal.segment) is None
    return result.proposal.segment, result.proposal.rationale


def corridor(name: str, first: str, second: str, won: bool = False) -> Trajectory:
    # what pivot-sim shows: the racks' texts and the walk are the same whatever the bag holds
    return seen(name, [(1, "rack 1: red, gold", f"take {first}"), (2, "the vault is 2 steps ahead", "go forward"),
                       (3, "rack 2: blue, green, gold", f"take {second}"), (4, "the vault is 1 step ahead",
                                                                            "go forward")], won)


def test_a_hidden_bag_sends_the_break_away_rule_to_the_approach_and_frequency_to_the_choice():
    s = corridor("S", "red", "blue", won=True)
    failures = [corridor("F1", "red", "green"), corridor("F2", "gold", "blue"), corridor("F3", "red", "gold")]
    # break-away in text: every text of S is one a failed run saw, the last (turn 3) included, so only the
    # final action is new -> the approach: turns 0..2, the last L=4 valid turns before the final one
    assert ask_named("text-contrast", s, *failures) == Segment("S", 0, 2)
    # frequency, by hand (S is the only success, so w = 1 wherever S went):
    #   turn 0 take red:    f = 2/3 (F1, F3)  -> 1 - 2/3 = 1/3
    #   turn 1 go forward:  f = 3/3           -> 0
    #   turn 2 take blue:   f = 1/3 (F2)      -> 1 - 1/3 = 2/3   <- the largest
    #   turn 3 is final: never proposed (no state after it to branch from)
    seg, why = ask_frequency(s, *failures)
    assert seg == Segment("S", 2, 2) and why.startswith("frequency:") and "1 of 3 failed" in why


def test_the_other_successes_count_and_a_move_the_failed_runs_share_scores_below_zero():
    s = seen("S", [(1, "hall", "wait"), (1, "hall", "open door"), (2, "room", "take gem")], True)
    s2 = seen("S2", [(1, "hall", "open door"), (2, "room", "take gem")], True)
    f = seen("F", [(1, "hall", "wait"), (1, "hall", "wait"), (1, "hall", "go back")])
    # winning visits to "hall": wait, open door, open door; failed: wait, wait, go back
    #   turn 0 wait:      1/3 - 2/3 = -1/3
    #   turn 1 open door: 2/3 - 0   = 2/3   <- the proposal
    assert ask_frequency(s, s2, f)[0] == Segment("S", 1, 1)


def test_an_idiosyncratic_move_of_one_success_loses_to_the_move_every_success_made():
    s = seen("S", [(1, "hall", "sing"), (2, "vault", "take gem"), (3, "exit", "leave")], True)
    s2 = seen("S2", [(1, "hall", "go left"), (2, "vault", "take gem"), (3, "exit", "leave")], True)
    f1 = seen("F1", [(1, "hall", "go left"), (2, "vault", "drop gem")])
    f2 = seen("F2", [(1, "hall", "go right"), (2, "vault", "drop gem")])
    #   turn 0 sing:     w = 1/2 (S only), f = 0 -> 1/2
    #   turn 1 take gem: w = 2/2,          f = 0 -> 1     <- the proposal
    # (counting S's visits alone, both would score 1 and the tie would go to turn 0)
    assert ask_frequency(s, s2, f1, f2)[0] == Segment("S", 1, 1)


def test_ties_go_to_the_more_visited_situation_then_to_the_earlier_turn():
    # turns 0 and 1 both score 1 - 0 = 1; "b" was visited by two failed runs, "a" by one
    s = seen("S", [(1, "a", "x"), (2, "b", "y"), (3, "c", "z")], True)
    f1 = seen("F1", [(1, "a", "q"), (2, "b", "r")])
    f2 = seen("F2", [(2, "b", "r")])
    assert ask_frequency(s, f1, f2)[0] == Segment("S", 1, 1)
    # equal evidence (F1 alone: one failed visit to each): the earlier turn
    assert ask_frequency(s, f1)[0] == Segment("S", 0, 0)


def test_no_turn_above_zero_falls_back_to_the_approach_or_to_nothing():
    # S did what the failed run did in every situation but the final one: every score is 1 - 1 = 0
    s = seen("S", [(1, "a", "x"), (2, "b", "y"), (3, "c", "z")], True)
    f = seen("F", [(1, "a", "x"), (2, "b", "y"), (3, "c", "w")])
    seg, why = ask_frequency(s, f)
    assert seg == Segment("S", 0, 1) and why.startswith("approach:")
    assert ask_frequency(s, f, fallback="none")[0] is None


def test_a_rejected_action_is_never_the_frequency_proposal():
    s = traj("S", [("A", "x"), ("B", "y", False), ("C", "z")], True)
    s.turns[1].observation = "b"  # aligned with F below, new there, but rejected by the env
    # turn 1 would win (score 1, two failed visits, against turn 0's score 1 and one visit) if it were valid
    f = seen("F", [("A", "A", "q"), ("B", "b", "r"), ("B", "b", "r")])
    assert ask_frequency(s, f)[0] == Segment("S", 0, 0)

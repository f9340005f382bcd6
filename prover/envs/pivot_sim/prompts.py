"""How an agent is prompted on pivot-sim: two ``AgentSpec`` presets, picked by name.

``compact`` (the default) is for tiny models trained on a CPU: the task, the last two (observation,
action) pairs, the observation, the admissible actions and the output format, a few hundred characters.
With ``clue="memory"`` the clue is only in the first observation, so a window of two loses it after two
turns; that is the point of that mode (raise ``rollout.history_window`` or use ``full`` to give the
agent a memory).

``full`` keeps the whole episode in the prompt (every pivot-sim episode is short) and asks for the
action in words, for pretrained models.
"""

from __future__ import annotations

from prover.envs.agent_spec import COMPACT_TURN, AgentSpec, compact_preset

_FORMAT = "Answer with <action>one admissible action</action>."

PRESETS: dict[str, AgentSpec] = {
    "compact": compact_preset(turn=f"{COMPACT_TURN}\n{_FORMAT}", history_entry="{observation}\n> {action}",
                              history_window=2),
    "full": AgentSpec(
        first_template=("You walk a corridor to a vault. Your task: {task}\nYou see: {observation}\n"
                        "Admissible actions: {actions}\nChoose one admissible action and give it inside "
                        "<action> </action> tags."),
        later_template=("You walk a corridor to a vault. Your task: {task}\nWhat happened so far:\n{history}\n"
                        "Step {step}. You see: {observation}\nAdmissible actions: {actions}\nChoose one "
                        "admissible action and give it inside <action> </action> tags."),
        history_entry="[Observation {k}: {observation} Action {k}: {action}]",
        action_separator=", ",
        history_window=50,
    ),
}

"""How an agent is prompted on ALFWorld: two ``AgentSpec`` presets, picked by name.

``verl-agent`` has the structure of verl-agent's ALFWorld prompt (agent_system/environments/prompts/
alfworld.py @796ed31), worded our own way: a first-step template with the observation and the quoted
admissible actions, a later-step template that adds the task, the step number and the last two
``[Observation k: '...', Action k: '...']`` entries, and the request to reason inside <think> tags
before answering inside <action> tags. "help" is hidden from the list, as verl-agent removes it.

``compact`` (the default) is for tiny models trained on a CPU: the same information with no prose,
so that a prompt is a few hundred characters.
"""

from __future__ import annotations

from prover.envs.agent_spec import AgentSpec, compact_preset

_INTRO = "You are an expert agent working in ALFRED, an embodied household environment."
_ACTIONS = "Your admissible actions in the current situation are: ['{actions}']."
_ASK = ("Now it is your turn to act. First reason step by step about the current situation, and put "
        "that reasoning inside <think> </think> tags. When you have finished, choose one admissible "
        "action for this step and give it inside <action> </action> tags.")

PRESETS: dict[str, AgentSpec] = {
    "verl-agent": AgentSpec(
        first_template=f"{_INTRO}\nYour current observation is: {{observation}}\n{_ACTIONS}\n\n{_ASK}",
        later_template=(
            f"{_INTRO} Your task is to: {{task}}\n"
            "Here are the {n_history} most recent observations and the actions you took after each:\n"
            "{history}\nYou are now at step {step}, and your current observation is: {observation}\n"
            f"{_ACTIONS}\n\n{_ASK}"
        ),
        history_entry="[Observation {k}: '{observation}', Action {k}: '{action}']",
        action_separator="'\n '",
        history_window=2,
        require_think=True,
        hidden_actions=("help",),
    ),
    "compact": compact_preset(history_entry="{observation}\n> {action}", history_window=2, hidden_actions=("help",)),
}

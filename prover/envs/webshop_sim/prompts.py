"""How an agent is prompted on WebShop: two ``AgentSpec`` presets, picked by name.

``verl-agent`` has the structure of verl-agent's WebShop prompt (agent_system/environments/prompts/
webshop.py @796ed31), in our own words: the task, the observation, the admissible actions quoted one
per line inside brackets, the last two ``[Observation k: '...', Action k: '...']`` entries after the
first step, and the request to reason in <think> tags about which action best advances the shopping
goal before answering in <action> tags.

``compact`` (the default) is for tiny models on a CPU: no prose, and a history of past actions only.
"""

from __future__ import annotations

from prover.envs.agent_spec import AgentSpec, compact_preset

_INTRO = "You are an expert agent shopping in WebShop, a simulated e-commerce website."
_ACTIONS = "Your admissible actions in the current situation are:\n[\n'{actions}'\n]."
_ASK = ("Now it is your turn to act. First reason step by step about the current situation and decide "
        "which admissible action best advances the shopping goal; put that reasoning inside <think> "
        "</think> tags. Then give the one action you choose for this step inside <action> </action> tags.")

PRESETS: dict[str, AgentSpec] = {
    "verl-agent": AgentSpec(
        first_template=(f"{_INTRO}\nYour task is to: {{task}}.\nYour current observation is: "
                        f"{{observation}}.\n{_ACTIONS}\n\n{_ASK}"),
        later_template=(
            f"{_INTRO}\nYour task is to: {{task}}.\nHere are your {{n_history}} most recent observations "
            "and the actions you took after each:\n"
            "{history}\nYou are now at step {step}, and your current observation is: {observation}.\n"
            f"{_ACTIONS}\n\n{_ASK}"
        ),
        history_entry="[Observation {k}: '{observation}', Action {k}: '{action}']",
        action_separator="',\n'",
        history_window=2,
        require_think=True,
    ),
    # past actions only: a WebShop page is long, and the current page plus the queries and clicks
    # so far say what the agent needs (a full-page history tripled the prompt, to ~450 tokens)
    "compact": compact_preset(history_entry="> {action}", history_window=4),
}

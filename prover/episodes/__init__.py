"""What the rollout (``prover.rollout``) is built from and what builds on it: prompts encoded so that env text
stays literal (``literal_text``) and an episode as one growing chat (``episode_chat``), on the ground floor; a
turn's prompt and completion ids within the prompt budget (``turn_prompts``), on the parts floor; and, on
the machinery floor beside the rollout, where a step's batch comes from (``async_rollout``), the Brancher's
continuations from recorded snapshots (``branching``) and judge diagnostics against an env's pivotal turns
(``truth``). A module here may import its own floor and those below (docs/architecture.md, "Floors"): the
ground modules only ``prover.errors``, ``prover.types`` and each other; ``turn_prompts`` the env contract
and the schema as well; the machinery modules the rollout and the parts (the engine and env contracts,
never an engine implementation).
"""

"""What the rollout (``prover.rollout``) is built from and what builds on it. On the ground floor, importing
no more than the ground floor: prompts encoded so that env text stays literal (``literal_text``) and an
episode as one growing chat (``episode_chat``). On the parts floor: a turn's prompt and completion ids within
the prompt budget (``turn_prompts``), which may import the env contract and the schema. On the machinery
floor, beside the rollout, which they may import with the parts' contracts: where a step's batch comes from
(``async_rollout``), the Brancher's continuations from recorded snapshots (``branching``) and judge
diagnostics against an env's pivotal turns (``truth``). See docs/architecture.md, "Floors".
"""

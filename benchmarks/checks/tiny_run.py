"""Settings that make a whole ``prover train`` run take seconds: a very small model, few episodes, short turns.
The soak check trains with them, and tests/conftest.py hands them to the tests (``TINY_RUN``,
``tiny_run_overrides``)."""

TINY_RUN = [
    "model.tiny.vocab_size=400", "model.tiny.hidden_size=32", "model.tiny.num_layers=2", "model.tiny.num_heads=2",
    "model.tiny.intermediate_size=64", "model.tiny.corpus_episodes=20",
    "warmstart.episodes=12", "warmstart.epochs=1",
    "rollout.groups_per_step=2", "rollout.group_size=3", "rollout.max_turns=6", "rollout.sampling.max_new_tokens=12",
    "eval.episodes=4", "learner.mini_batch_rows=16", "learner.micro_batch_rows=16",
]

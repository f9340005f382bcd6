"""A run's folder, what it records, and what is checked before it is touched. On the records floor, the
checkpoint's optimizer and RNG state as data, with its manifest (``checkpoint_state``), the trackers
(``trackers``) and the rollout groups kept as text (``samples``), each importing no more than the ground
floor, the schema and the registry floor; the run folder itself, its lock, config.yaml, metrics.jsonl and
atomic checkpoints (``run``), on the run-folder floor, which may import the records; the starting policy's
evaluation kept by what decides it (``eval_cache``), on the policy floor; and every check that can fail
before the folder is touched (``preflight``), on the assembly floor, which may import every part it checks.
See docs/architecture.md, "Floors".
"""

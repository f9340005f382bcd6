"""The learner and what it is built from: the PPO-clip update with KL, entropy and accelerate (``learner``,
machinery floor); on the parts floor, what a checkpoint folder says, read without torch, and the run's
``ModelSpec`` (``model_folder``), the torch-side helpers that load a model (``modeling``) and the log-probs
of completions (``logprobs``), which engines, judges and the policy use too, the rows the learner forwards
(``learner_rows``), its per-token losses (``learner_loss``), LoRA through peft (``lora``) and frozen weights
cast once for bfloat16 autocast (``frozen_weights``); rows batched by length (``padding``) on the ground
floor. Each module may import its own floor and those below it (docs/architecture.md, "Floors"): the parts
here the ground floor, the schema and each other; ``learner`` the parts as well. No module here imports an
engine implementation, the rollout, credit or the trainer.
"""

"""The learner's room: the PPO-clip update with KL, entropy and accelerate (``learner``, on the machinery
floor) and what it is built from, on the parts floor: the torch-side helpers that load a model and gather
log-probs (``modeling``, which engines, judges and the policy use too), the rows it forwards
(``learner_rows``), its per-token losses (``learner_loss``), LoRA through peft (``lora``) and frozen weights
cast once for bfloat16 autocast (``frozen_weights``); rows batched by length (``padding``) stand on the ground
floor. A module here may import its own floor and those below: the ground helpers, the schema, the registry
floor and, for ``learner``, the parts; never an engine implementation, the rollout, credit or the trainer
(docs/architecture.md, "Floors").
"""

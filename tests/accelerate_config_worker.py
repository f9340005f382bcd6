"""What tests/test_accelerate_configs.py runs: one learner update on a fixed batch, in one process or in
each process of an ``accelerate launch`` of one of examples/accelerate/*.yaml.

    python accelerate_config_worker.py POLICY_DIR OUT_DIR

Every process takes rows rank, rank + world, ... of the same ``N_ROWS`` rows, so two processes together
see exactly the batch one process sees alone. The main process writes ``OUT_DIR/update.json`` (the
backend accelerate chose and every process's metrics) and ``OUT_DIR/weights.safetensors`` (the full
weights after the update, gathered from the shards under FSDP).

accelerate (1.16) never shards on CPU by itself: a CPU process is MULTI_CPU, which makes every
``fsdp_config`` plain DDP, and its DeepSpeed branch is skipped whenever ``cpu=True`` (which the learner
passes without a GPU). ``prover.system.distributed.shard_on_cpu`` sets accelerate's shared state up the way a GPU
launch would,
over gloo, so the learner's own ``Accelerator`` then runs accelerate's real FSDP2 or DeepSpeed path.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from prover.system.distributed import shard_on_cpu

N_ROWS = 4


def rows(rank: int, world: int):
    """This process's share of the batch: single-turn trajectories with distinct tokens and advantages."""
    from prover.types import Advantages, Batch, Group, Trajectory, Turn

    mine = range(rank, N_ROWS, world)
    trajs = [Trajectory(traj_id=f"t{i}", task_id="task", task_text="t",
                        turns=[Turn(prompt_ids=[5 + i, 6, 7 + 2 * i], completion_ids=[8, 9 + i, 30 - i],
                                    logprobs=[-6.0, -5.8, -6.2 + 0.1 * i], observation="o", completion_text="c",
                                    action="a", format_valid=True, action_valid=True, reward=0.0, state_key=i)])
             for i in mine]
    adv = Advantages(values=[[[np.array([1.0 - 0.6 * i, 0.5, -0.3 * i], np.float32)] for i in mine]])
    return Batch([Group("task", trajs)]), adv


def checkpoint(learner, out: Path) -> str | None:
    """The trainer's checkpoint of the updated learner (Trainer.save_checkpoint): None, or its error."""
    from prover.config import TrainConfig
    from prover.errors import CheckpointError
    from prover.rundir.run import RunDir

    weights = learner.gathered_state() if learner.accelerator.num_processes > 1 else None  # every process
    if not learner.accelerator.is_main_process:
        return None
    try:
        RunDir(TrainConfig(run={"dir": str(out / "run")})).save_checkpoint(1, learner, weights)
    except CheckpointError as exc:
        return str(exc)
    return None


def update(policy_dir: str, out_dir: str) -> None:
    import torch
    from safetensors.torch import save_file

    from prover.config import LearnerConfig
    from prover.learning.learner import Learner

    shard_on_cpu()
    # one mini-batch of one micro-batch (DeepSpeed steps after every backward); seq-mean-token-sum
    # weighs every row 1/rows, so the mean of two processes' losses is the loss of one over all rows
    cfg = LearnerConfig(lr=1e-2, mini_batch_rows=N_ROWS, micro_batch_rows=N_ROWS,
                        loss_agg="seq-mean-token-sum", entropy_coef=0.01, grad_clip=1.0)
    learner = Learner(policy_dir, cfg, max_completion_tokens=3)
    acc = learner.accelerator
    stats = learner.update(*rows(acc.process_index, acc.num_processes))
    state = learner.policy_state_dict()  # every process must call it: FSDP gathers here
    saved = checkpoint(learner, Path(out_dir))
    all_stats = [stats]
    if acc.num_processes > 1:
        all_stats = [None] * acc.num_processes
        torch.distributed.all_gather_object(all_stats, stats)
    if acc.is_main_process:
        out = Path(out_dir)
        (out / "update.json").write_text(json.dumps({
            "distributed_type": str(acc.distributed_type).rsplit(".", 1)[-1],
            "processes": acc.num_processes, "stats": all_stats,
            # how the model was really wrapped: FSDP2 holds DTensor shards, DeepSpeed reports its ZeRO stage
            "param_type": type(next(learner.model.parameters())).__name__,
            "zero_stage": getattr(learner.model, "zero_optimization_stage", lambda: None)(),
            # what an engine would load: plain tensors, never shards
            "state_types": sorted({type(v).__name__ for v in state.values()}), "checkpoint_error": saved}))
        if all(type(v) is torch.Tensor for v in state.values()):
            save_file({k: v.detach().to("cpu", torch.float32, copy=True) for k, v in state.items()},  # tied: copies
                      str(out / "weights.safetensors"))


if __name__ == "__main__":
    update(sys.argv[1], sys.argv[2])

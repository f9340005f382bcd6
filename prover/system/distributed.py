"""Training in several processes (``accelerate launch``): who does what, and how their results meet.

Every process (rank) holds a full copy of the loop. It rolls out its share of the step's tasks, assigns
credit on its own groups and updates the learner, whose gradients accelerate averages across the
processes (DDP, FSDP or DeepSpeed, as the launcher's config says). The main process alone writes
metrics, checkpoints and evaluation lines. Started plainly (one process), nothing here touches
``torch.distributed`` and the loop runs exactly as it always did.

Merging a step's metrics across processes: counts (``cost/*``, ``judge/*``, ``learner/rows`` and the other row and
token counts of the learner, the ``truth/`` counts, among them the engine's request, token and retry counts) are
totals, ``time/*`` is the slowest process, every other value is the mean of the processes' values (a rate,
such as ``rollout/format_valid`` or ``engine/cached_ratio``, is a mean of per-process rates).
"""

from __future__ import annotations

import os
from typing import Any, TypeVar

from prover.errors import CheckpointError, ConfigError

T = TypeVar("T")

TOTALS = ("cost/", "judge/", "learner/rows", "learner/tokens", "learner/sequence_rows", "learner/forwarded_tokens",
          "learner/unique_tokens", "truth/proposals", "truth/hits", "truth/accepted")
SLOWEST = ("time/",)


def world_size() -> int:
    """Processes of this run, from the launcher's environment; 1 when started plainly."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def process_rank() -> int:
    """This process's rank, from the launcher's environment; 0 when started plainly."""
    return int(os.environ.get("RANK", "0"))


class Ranks:
    """This process's place among the run's processes, and the few collectives the trainer needs."""

    def __init__(self) -> None:
        self.rank, self.world = 0, world_size()
        if self.world > 1:
            # torch and accelerate are heavy: a single process never loads them
            import torch
            from accelerate import PartialState

            # the same device choice as the learner's Accelerator, which shares this state
            state = PartialState(cpu=not torch.cuda.is_available())
            self.rank, self.world = state.process_index, state.num_processes

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def share(self, items: list) -> list:
        """This process's part of ``items``: every world-th one, starting at its rank."""
        return items[self.rank::self.world]

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist  # torch is heavy: only several processes need it

            dist.barrier()

    def gather(self, obj: T) -> list[T]:
        """``obj`` of every process, in rank order, on every process."""
        if self.world == 1:
            return [obj]
        import torch.distributed as dist  # torch is heavy: only several processes need it

        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def merged(self, record: dict[str, Any]) -> dict[str, Any]:
        """A step's metrics over all processes (see the module docstring); the record itself when alone."""
        return record if self.world == 1 else merge_records(self.gather(record))

    def check_config(self, groups: int, max_off_policy_steps: int) -> None:
        """Refuse a split of the step's tasks (``rollout.groups_per_step``) that would leave processes with
        unequal shares, and a rollout worker (``rollout.max_off_policy_steps``) beside several processes."""
        if self.world > 1 and max_off_policy_steps:
            raise ConfigError(f"rollout.max_off_policy_steps={max_off_policy_steps} runs one rollout "
                              f"worker beside one learner; under {self.world} processes set it to 0")
        if self.world > 1 and groups % self.world:
            raise ConfigError(f"rollout.groups_per_step={groups} does not split evenly over {self.world} "
                              f"processes; make it a multiple of {self.world}")

    def check_learner(self, mini: int, micro: int, lora: bool, accelerator: object, resume: bool) -> None:
        """Refuse what the learner cannot do under the launcher's sharding (``accelerator``'s), before any
        work starts: ``learner.mini_batch_rows``, ``learner.micro_batch_rows``, ``model.lora.enabled``."""
        kind = str(getattr(accelerator, "distributed_type", "")).rsplit(".", 1)[-1]
        if kind == "DEEPSPEED" and micro < mini:
            # accelerate's DeepSpeed backward steps the optimizer after every micro-batch
            raise ConfigError(f"under DeepSpeed every backward is an optimizer step: set "
                              f"learner.micro_batch_rows={mini} (= learner.mini_batch_rows), not {micro}")
        if resume and kind in ("FSDP", "DEEPSPEED"):
            # a LoRA checkpoint holds the adapter alone, which cannot be a new run's model.path
            fresh = ("" if lora else ", or start a new run from the checkpoint: "
                     "model.path=<run.dir>/checkpoints/step-N warmstart.enabled=false")
            raise CheckpointError(f"--resume under {kind}: checkpoints keep only the main process's shard "
                                  f"of the optimizer state; resume with DDP{fresh}")


def leave_process_group() -> None:
    """End a finished run's process group (several processes) before the interpreter exits: left to exit,
    its gloo threads can be destroyed while still joinable, and a rank that finished its run aborts with
    "terminate called without an active exception" (exit -6; seen once, in a fresh-clone CI run)."""
    if world_size() > 1:
        import torch.distributed as dist  # torch is heavy: only several processes need it

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


def shard_on_cpu() -> None:
    """Make accelerate use the launcher's FSDP or DeepSpeed config in a CPU process, as a GPU launch would;
    nothing in a plain process. For checks of the sharded paths without a GPU (tests/accelerate_config_worker.py,
    benchmarks.checks.device_check --cpu): accelerate (1.16) never shards on CPU by itself, since a CPU
    process is MULTI_CPU, which makes every ``fsdp_config`` plain DDP, and its DeepSpeed branch is skipped
    whenever ``cpu=True`` (which the learner passes without a GPU). Set up here, over gloo, the learner's own
    ``Accelerator`` then runs accelerate's real FSDP2 or DeepSpeed path. Call it before the learner is built."""
    # accelerate loads torch: only a sharded CPU check calls this
    from accelerate import Accelerator
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    if os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true":
        PartialState(cpu=True)  # a gloo process group, MULTI_CPU
        # the FSDP plugin is attached only to a MULTI_GPU-like state; the device stays the CPU
        PartialState._shared_state["distributed_type"] = DistributedType.MULTI_GPU
    elif os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        # cpu=False reaches deepspeed.comm.init_distributed; gloo, since accelerate finds no device backend
        PartialState(cpu=False, backend="gloo")
        Accelerator(cpu=False)  # builds the shared DeepSpeed state; the learner's Accelerator reuses it


def merge_records(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One metrics record from one per process (see the module docstring for the rule per name)."""
    out: dict[str, Any] = {}
    for key in dict.fromkeys(k for r in records for k in r):  # every name, in first-seen order
        values = [r[key] for r in records if key in r]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values) or key == "step":
            out[key] = values[0]
        elif key.startswith(TOTALS):
            out[key] = float(sum(values))
        elif key.startswith(SLOWEST):
            out[key] = float(max(values))
        else:
            out[key] = float(sum(values) / len(values))
    return out

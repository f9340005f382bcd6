"""Training in two processes on CPU (gloo): the learner stays in step across processes with unequal work,
and ``accelerate launch ... -m prover.cli train`` runs a tiny run to the end with one set of metrics and
the same weights in every process.

``accelerate launch --cpu`` starts one process unless it is given an MPI hostfile; ``--multi_gpu`` on a
machine whose GPUs are hidden starts torchrun processes that accelerate sets up as MULTI_CPU over gloo.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from prover.system.distributed import Ranks, merge_records

TESTS = Path(__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONWARNINGS="ignore",
                HF_HOME=str(tmp_path / "hf"),  # no accelerate config of the user's
                PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))


def _finish(procs: list[subprocess.Popen], timeout: float) -> list[str]:
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail("the processes did not finish: they are out of step (a collective that only some reached)")
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-4000:]
    return outs


# -- one process: the rules, without torch.distributed ----------------------------------------------

def test_one_process_is_rank_zero_of_one():
    ranks = Ranks()
    assert (ranks.rank, ranks.world, ranks.is_main) == (0, 1, True)
    assert ranks.share([3, 1, 2]) == [3, 1, 2] and ranks.gather("x") == ["x"]
    record = {"step": 1, "rollout/success": 0.5}
    assert ranks.merged(record) is record


def test_merge_rule_per_metric_name():
    a = {"step": 3, "phase": "train", "rollout/success": 0.25, "cost/rollout_tokens": 100.0,
         "learner/rows": 4.0, "learner/updates": 1.0, "time/rollout": 2.0, "judge/calls": 1.0}
    b = {"step": 3, "phase": "train", "rollout/success": 0.75, "cost/rollout_tokens": 50.0,
         "learner/rows": 2.0, "learner/updates": 3.0, "time/rollout": 5.0, "credit/delta": 0.4}
    assert merge_records([a, b]) == {
        "step": 3, "phase": "train", "rollout/success": 0.5, "cost/rollout_tokens": 150.0,
        "learner/rows": 6.0, "learner/updates": 2.0, "time/rollout": 5.0, "judge/calls": 1.0,
        "credit/delta": 0.4}  # a name only one process logged is that process's value


def learner_settings(cfg) -> tuple[int, int, bool]:
    """What ``Ranks.check_learner`` reads of a run's config."""
    return cfg.learner.mini_batch_rows, cfg.learner.micro_batch_rows, cfg.model.lora.enabled


def test_what_several_processes_refuse(train_cfg):
    from types import SimpleNamespace

    from accelerate.utils import DistributedType

    from prover.errors import CheckpointError, ConfigError

    two = Ranks.__new__(Ranks)  # rank 1 of 2, without starting a process group
    two.rank, two.world = 1, 2
    assert two.share(list(range(5))) == [1, 3] and not two.is_main
    train_cfg.rollout.groups_per_step = 3
    with pytest.raises(ConfigError, match="rollout.groups_per_step=3 does not split evenly over 2 processes"):
        two.check_config(train_cfg.rollout.groups_per_step, train_cfg.rollout.max_off_policy_steps)
    train_cfg.learner.mini_batch_rows, train_cfg.learner.micro_batch_rows = 64, 8
    deepspeed, fsdp, ddp = (SimpleNamespace(distributed_type=t) for t in
                            (DistributedType.DEEPSPEED, DistributedType.FSDP, DistributedType.MULTI_GPU))
    with pytest.raises(ConfigError, match="set learner.micro_batch_rows=64"):
        two.check_learner(*learner_settings(train_cfg), deepspeed, resume=False)
    with pytest.raises(CheckpointError, match="--resume under FSDP"):
        two.check_learner(*learner_settings(train_cfg), fsdp, resume=True)
    two.check_learner(*learner_settings(train_cfg), fsdp, resume=False)
    two.check_learner(*learner_settings(train_cfg), ddp, resume=True)


def test_padding_rows_change_nothing(tiny_policy_dir):
    """A process with fewer rows trains on empty rows too; they must add nothing to the gradient. (The
    gradient is compared, not the weights: Adam's step hardly changes when the gradient is scaled.)"""
    import numpy as np

    from prover.config import LearnerConfig
    from prover.learning.learner import Learner, Row

    def one_update(n_padding: int) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
        learner = Learner(tiny_policy_dir, LearnerConfig(loss_agg="seq-mean-token-sum", grad_clip=1e9),
                          max_completion_tokens=4)
        rows = [Row([5 + i, 6], [7, 8 + i], np.array([-1.0, -1.2], np.float32),
                    np.array([1.0, -0.5 * i], np.float32), np.ones(2, np.float32)) for i in range(3)]
        stats = learner._mini_batch(rows + [learner._padding_row()] * n_padding)
        return stats, {k: p.grad.clone() for k, p in learner.unwrapped().named_parameters()}

    (plain_stats, plain), (padded_stats, padded) = one_update(0), one_update(2)
    # seq-mean divides by the row count: padding counted as rows would scale everything by 3/5. The pass's
    # token counts (tokens, padded_tokens) measure compute, which the padding rows do add to: left out here
    compute = ("tokens", "padded_tokens")
    learned = {k: v for k, v in plain_stats.items() if k not in compute}
    assert {k: v for k, v in padded_stats.items() if k not in compute} == pytest.approx(learned, rel=1e-5)
    assert padded_stats["padded_tokens"] > plain_stats["padded_tokens"]
    assert any(float(g.abs().max()) > 0 for g in plain.values())
    for k in plain:
        torch.testing.assert_close(padded[k], plain[k], rtol=1e-5, atol=1e-8)


# -- two processes ----------------------------------------------------------------------------------

def test_learner_stays_in_step_with_unequal_rows(tiny_policy_dir, tmp_path):
    """Rank 0 has 5 rows (3 mini-batches of <= 2), rank 1 has 1: without padding, rank 1 would stop after
    one all-reduce while rank 0 waits in its second, and the run would hang."""
    port = _free_port()
    procs = []
    for rank, n_rows in ((0, 5), (1, 1)):
        env = dict(_env(tmp_path), RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, str(TESTS / "multiprocess_worker.py"), "learner",
                                       str(tiny_policy_dir), str(tmp_path), str(n_rows)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    _finish(procs, timeout=300)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["learner/updates"] == 3 and r1["learner/updates"] == 1  # real mini-batches, padding not counted
    assert r0["learner/rows"] == 5 and r1["learner/rows"] == 1
    assert r0["before"] == r1["before"] and r0["after"] == r1["after"], "the processes hold different weights"
    assert r0["after"] != r0["before"]


def test_learner_stays_in_step_with_a_sequence_row(tiny_policy_dir, tmp_path):
    """Rank 0 has a chat of 3 turns (one sequence row) and 1 turn row, rank 1 has 4 turn rows: one mini-batch
    of 4 turns each, in micro-batches of 1 turn: 2 forward passes on rank 0 (the turn row, then the chat),
    4 on rank 1. Rank 0 adds 2 empty micro-batches, or the processes would be out of step and hang."""
    port = _free_port()
    procs = []
    for rank, n_rows, chat_turns in ((0, 1, 3), (1, 4, 0)):
        env = dict(_env(tmp_path), RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, str(TESTS / "multiprocess_worker.py"), "learner",
                                       str(tiny_policy_dir), str(tmp_path), str(n_rows), str(chat_turns), "4"],
                                      env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    _finish(procs, timeout=300)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["learner/sequence_rows"] == 1 and r1["learner/sequence_rows"] == 0
    assert r0["learner/rows"] == r1["learner/rows"] == 4 and r0["learner/updates"] == r1["learner/updates"] == 1
    assert r0["after"] == r1["after"] != r0["before"], "the processes hold different weights"


# torch's process group can abort a rank with std::terminate as the launched processes meet (see
# tests/test_accelerate_configs.py); such a launch, with no metrics written, is tried again on a new port, twice
START_ABORT = "terminate called without an active exception"


def _launch_train(overrides: list[str], env: dict, tmp_path: Path, retries: int = 2) -> str:
    accelerate = Path(sys.executable).with_name("accelerate")
    launch = [str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
              "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port()),
              "-m", "prover.cli", "train", *overrides]
    proc = subprocess.Popen(launch, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        out = proc.communicate(timeout=600)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the processes did not finish: they are out of step (a collective that only some reached)")
    started = (tmp_path / "run" / "metrics.jsonl").exists()  # an abort at the end is the run's, not the start's
    if proc.returncode != 0 and START_ABORT in out and not started and retries > 0:
        return _launch_train(overrides, env, tmp_path, retries - 1)
    assert proc.returncode == 0, out[-4000:]
    return out


@pytest.mark.slow
def test_accelerate_launch_trains_two_processes(tiny_run_overrides, tmp_path):
    """`prover sft` in one process, then `accelerate launch` of `prover train` in two."""
    checks = tmp_path / "checks"
    overrides = tiny_run_overrides + [
        "steps=2", "eval.episodes=3",  # 3 eval episodes: shares of 2 and 1
        "engine.name=multiprocess_worker:ChecksumEngine", f"engine.kwargs.checksum_dir={checks}",
        # every turn is a row and the entropy bonus gives every row a gradient, so weights surely move;
        # small mini- and micro-batches make the two processes' update counts differ
        "learner.skip_zero_advantage_rows=false", "learner.entropy_coef=0.01", "learner.lr=5e-3",
        "learner.mini_batch_rows=4", "learner.micro_batch_rows=2"]
    env = _env(tmp_path)
    _finish([subprocess.Popen([sys.executable, "-m", "prover.cli", "sft", *overrides], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)], timeout=300)
    out = _launch_train(overrides, env, tmp_path)

    run = tmp_path / "run"
    hist = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(r["phase"], r["step"]) for r in hist] == [("eval", 0), ("train", 1), ("train", 2), ("eval", 2)], out
    assert out.count("eval at step 2: held-out success") == 1  # only the main process reports
    for r in (r for r in hist if r["phase"] == "train"):
        assert r["rollout/group_size"] == 3
        # 2 tasks x 3 episodes over both processes: every turn is a row (rows are summed over the
        # processes, turns per episode averaged over equal numbers of episodes)
        assert r["learner/rows"] == pytest.approx(6 * r["rollout/turns"])
    for r in (r for r in hist if r["phase"] == "eval"):
        assert r["eval/episodes"] == 3.0 and r["eval/success"] in (0.0, 1 / 3, 2 / 3, 1.0)

    def sync(n: int, rank: int) -> dict[str, str]:
        return json.loads((checks / f"sync-{n}-rank{rank}.json").read_text())

    for n in (0, 1, 2):
        assert sync(n, 0) == sync(n, 1), f"the processes sample from different weights after sync {n}"
    assert sync(1, 0) != sync(0, 0), "RL changed no weight"
    from safetensors.torch import load_file

    from multiprocess_worker import digests

    saved = digests(load_file(str(run / "checkpoints" / "step-2" / "model.safetensors")))
    assert saved == {k: v for k, v in sync(2, 0).items() if k in saved}, "the checkpoint is not the synced policy"

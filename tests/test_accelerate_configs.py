"""The configs in examples/accelerate/, each launched with ``accelerate launch`` in two CPU processes (gloo),
against one process: the same update on the same batch must give the same loss and the same weights.

The configs are the GPU ones, unchanged; the launch overrides what CPUs cannot do: ``--mixed_precision no``
(fp32 on both sides, so the comparison can be tight), ``--num_processes 2``, and for DeepSpeed a copy of
ds_zero2.json with bf16 off (``--deepspeed_config_file``). ``--cpu`` is not passed: with it accelerate
starts one process; with the GPUs hidden it starts two through torchrun, which come up as CPU processes.
accelerate itself falls back to DDP for FSDP and DeepSpeed in CPU processes, so the worker
(tests/accelerate_config_worker.py) sets its state up as a GPU launch would, and each test checks the
backend that really ran (FSDP2: DTensor shards; DeepSpeed: ZeRO stage 2).

Tolerance: weights within 1e-5 (absolute) after one AdamW step of lr 1e-2. The two sides sum the same
fp32 gradients in a different order (one sum over 4 rows, or two sums of 2 rows averaged across processes),
so gradients differ in the last bits; AdamW's first step is about lr * g / |g|, which turns those bits into
visible differences only where |g| is near AdamW's eps (measured: at most 3.7e-6, on 11 of 44,512 weights).
1e-5 is a thousandth of the step every trained weight takes: a process stepping on its own half of the
gradient, or a shard left out of the step, moves weights by about lr. Losses and the gradient norm (which
the clip uses, and which AdamW's step would hide) agree within a relative 1e-5.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each case starts `accelerate launch` with two processes

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
CONFIGS = ROOT / "examples" / "accelerate"
WEIGHT_ATOL = 1e-5
STAT_REL = 1e-5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# torch's process group can abort while the launched processes meet (std::terminate in a rank, before the
# worker runs a line of the update): seen in fresh-clone CI runs (once on 3d3d54b, twice in a row, in the ddp
# case, on 449f45b), not reproduced outside them; such a start is retried, on a new port, up to twice
START_ABORT = "terminate called without an active exception"
START_RETRIES = 2


def _run(cmd: list[str], tmp_path: Path, timeout: float = 600, start_retries: int = 0) -> str:
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONWARNINGS="ignore",
               HF_HOME=str(tmp_path / "hf"))  # no accelerate config of the user's
    proc = subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)
    if proc.returncode != 0 and start_retries > 0 and START_ABORT in proc.stdout:
        port = cmd.index("--main_process_port") + 1
        cmd = [*cmd[:port], str(_free_port()), *cmd[port + 1:]]
        return _run(cmd, tmp_path, timeout, start_retries - 1)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return proc.stdout


def _read(out: Path) -> tuple[dict, dict]:
    from safetensors.torch import load_file

    return json.loads((out / "update.json").read_text()), load_file(str(out / "weights.safetensors"))


@pytest.fixture(scope="module")
def one_process(tiny_policy_dir, tmp_path_factory):
    """The reference: the same update in one plain process."""
    out = tmp_path_factory.mktemp("one-process")
    _run([sys.executable, str(TESTS / "accelerate_config_worker.py"), str(tiny_policy_dir), str(out)], out)
    return _read(out)


def _fp32_deepspeed_json(tmp_path: Path) -> Path:
    cfg = json.loads((CONFIGS / "ds_zero2.json").read_text())
    cfg["bf16"]["enabled"] = False
    path = tmp_path / "ds_zero2_fp32.json"
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize("config, processes, backend", [
    ("ddp.yaml", 2, "MULTI_CPU"), ("fsdp.yaml", 2, "FSDP"), ("deepspeed_zero2.yaml", 2, "DEEPSPEED"),
    ("fsdp.yaml", 1, "FSDP"),  # FSDP on one GPU: the weights an engine loads must be plain tensors there too
])
def test_launched_update_matches_one_process(config, processes, backend, one_process, tiny_policy_dir, tmp_path):
    launch = [str(Path(sys.executable).with_name("accelerate")), "launch", "--config_file", str(CONFIGS / config),
              "--num_processes", str(processes), "--mixed_precision", "no", "--main_process_port", str(_free_port())]
    if backend == "DEEPSPEED":
        if importlib.util.find_spec("deepspeed") is None:
            pytest.skip("deepspeed is not installed (pip install deepspeed; it is in the dev extra)")
        launch += ["--deepspeed_config_file", str(_fp32_deepspeed_json(tmp_path))]
    out = tmp_path / "out"
    out.mkdir()
    _run(launch + [str(TESTS / "accelerate_config_worker.py"), str(tiny_policy_dir), str(out)], tmp_path,
         start_retries=START_RETRIES)
    got = json.loads((out / "update.json").read_text())
    assert (got["distributed_type"], got["processes"]) == (backend, processes)
    if backend == "FSDP":
        assert got["param_type"] == "DTensor", "the parameters are not sharded"
    if backend == "DEEPSPEED":
        assert got["zero_stage"] == 2
    assert got["state_types"] == ["Tensor"], "policy_state_dict() handed out shards"
    assert got["checkpoint_error"] is None
    (ref, ref_weights), (_, weights) = one_process, _read(out)

    [single] = ref["stats"]
    assert sum(s["learner/rows"] for s in got["stats"]) == single["learner/rows"] == 4
    for key in ("learner/pg_loss", "learner/entropy"):  # each process's loss is over its share of the rows
        mean = sum(s[key] for s in got["stats"]) / processes
        assert mean == pytest.approx(single[key], rel=STAT_REL, abs=1e-7), key
    for s in got["stats"]:  # the norm of the whole gradient, as every process sees it
        assert s["learner/grad_norm"] == pytest.approx(single["learner/grad_norm"], rel=STAT_REL)

    assert weights.keys() == ref_weights.keys()
    diff = max(float((weights[k] - ref_weights[k]).abs().max()) for k in weights)
    moved = max(float((ref_weights[k] - before).abs().max()) for k, before in _initial(tiny_policy_dir).items())
    assert moved > 1e-3, "the update changed no weight: the comparison would prove nothing"
    assert diff <= WEIGHT_ATOL, f"{config}: weights differ from one process's by up to {diff:.2e}"
    print(f"{config} x{processes}: max weight difference {diff:.2e}")  # shown with pytest -s


def _initial(policy_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(Path(policy_dir) / "model.safetensors"))

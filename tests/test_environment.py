"""What a run's numbers depend on besides its config: environment.json in every run folder, `prover env`,
`prover --version`, `prover train --print-config`, and the environment in `prover view`'s report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
import yaml

import prover
from prover.cli import main
from prover.commands.view import render
from prover.config_load import load_config
from prover.rundir.run import RunDir
from prover.system import environment

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 207
model name\t: Intel(R) Xeon(R) Processor
stepping\t: 2
flags\t\t: fpu vme avx avx2 avx512f amx_tile avx512_vnni

processor\t: 1
model name\t: a second processor is not read
flags\t\t: amx_bf16 avx512_bf16
"""


def test_a_fresh_run_folder_records_its_environment_beside_its_config(tmp_path):
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # what the record must say, whatever the test machine's default
    run = RunDir(load_config(None, [f"run.dir={tmp_path / 'run'}"]))
    try:
        run.start(fresh=True)
    finally:
        torch.set_num_threads(threads)
    env = json.loads((tmp_path / "run" / "environment.json").read_text())
    assert (tmp_path / "run" / "config.yaml").is_file()
    assert env["python"]["version"] == "{}.{}.{}".format(*sys.version_info[:3])
    assert env["torch"] == torch.__version__ and env["torch_threads"] == 1
    assert env["packages"]["numpy"] == numpy.__version__ and env["packages"]["PyYAML"] == yaml.__version__
    assert set(env["cpu"]["flags"] or {}) <= set(environment.CPU_FLAGS)
    assert env["gpus"] == ([torch.cuda.get_device_name(0)] if torch.cuda.is_available() else [])
    run.log({"phase": "eval", "step": 0})
    run.start(fresh=True)  # a second fresh start moves the first run's record aside with its history
    (aside,) = tmp_path.glob("run.old-*")
    assert sorted(p.name for p in aside.iterdir()) == ["config.yaml", "environment.json", "metrics.jsonl"]
    assert (tmp_path / "run" / "environment.json").is_file()


def test_the_cpu_record_reads_the_first_processor_of_proc_cpuinfo(tmp_path):
    (tmp_path / "cpuinfo").write_text(CPUINFO)
    cpu = environment.cpu(tmp_path / "cpuinfo")
    assert cpu["model"] == "Intel(R) Xeon(R) Processor" and cpu["family_model_stepping"] == "6/207/2"
    assert cpu["flags"] == {"avx2": True, "avx512f": True, "avx512_bf16": False, "amx_bf16": False,
                            "amx_tile": True}
    assert environment.cpu(tmp_path / "absent")["flags"] is None  # unknown, not "has none of them"


def test_bfloat16_on_a_cpu_without_its_instructions_gets_a_note():
    """AVX512-BF16 or AMX multiply bfloat16 in hardware; without both, a run asking for bfloat16 is told it is
    slower there; on a GPU, in float32, or where the flags are unknown, nothing is said."""
    from prover.config import TrainConfig
    from prover.rundir.preflight import precision_note

    avx2 = {"avx2": True, "avx512f": False, "avx512_bf16": False, "amx_bf16": False, "amx_tile": False}
    assert environment.native_bfloat16(avx2) is False
    assert environment.native_bfloat16({**avx2, "amx_bf16": True}) is True
    assert environment.native_bfloat16({**avx2, "avx512_bf16": True}) is True
    assert environment.native_bfloat16(None) is None
    bf16 = TrainConfig.model_validate({"model": {"engine_dtype": "bfloat16"}, "learner": {"autocast": "bfloat16"}})
    note = precision_note(bf16, on_gpu=False, flags=avx2)
    assert note is not None and note.startswith("model.engine_dtype=bfloat16, learner.autocast=bfloat16 on a CPU "
                                                "without AVX512-BF16 or AMX") and "\n" not in note
    assert precision_note(bf16, on_gpu=True, flags=avx2) is None
    assert precision_note(bf16, on_gpu=False, flags={**avx2, "amx_bf16": True}) is None
    assert precision_note(bf16, on_gpu=False, flags=None) is None  # unknown, not absent
    assert precision_note(TrainConfig(), on_gpu=False, flags=avx2) is None  # float32 throughout


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_the_commit_is_the_checkouts_and_says_when_it_has_uncommitted_changes(tmp_path):
    repo = tmp_path / "checkout"
    (repo / "prover").mkdir(parents=True)
    (repo / "prover" / "x.py").write_text("a = 1\n")
    assert environment.git_commit(repo / "prover") is None  # not a checkout (an installed wheel)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = _git(repo, "log", "-1", "--format=%H")
    assert environment.git_commit(repo / "prover") == {"commit": head, "dirty": False}
    (repo / "prover" / "x.py").write_text("a = 2\n")
    assert environment.git_commit(repo / "prover") == {"commit": head, "dirty": True}


def test_by_default_the_commit_is_that_of_the_checkout_holding_prover():
    """With no source given, the checkout is the folder above the ``prover`` package, wherever in the
    package the code that asks stands."""
    root = Path(prover.__file__).resolve().parents[1]
    if not (root / ".git").exists():
        pytest.skip("prover is not imported from a git checkout here")
    found = environment.git_commit()
    assert found is not None and found["commit"] == _git(root, "rev-parse", "HEAD")


def test_version_prints_the_distributions_version_and_exits_0(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith(f"prover {version('prover-rl')}")


def test_prover_env_prints_the_record(capsys):
    import torch

    assert main(["env"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"python: {sys.version.split()[0]} ({sys.executable})" in lines
    assert any(line.startswith(f"torch: {torch.__version__}, ") for line in lines)
    assert f"  numpy=={numpy.__version__}" in lines
    assert main(["env", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["packages"]["numpy"] == numpy.__version__


def test_print_config_prints_the_resolved_config_and_trains_nothing(tmp_path, capsys, monkeypatch):
    import prover.trainer

    def no_training(*args, **kwargs):
        raise AssertionError("--print-config started training")

    monkeypatch.setattr(prover.trainer, "Trainer", no_training)
    run_dir = tmp_path / "run"
    assert main(["train", "--print-config", "--run-dir", str(run_dir), "steps=3", "credit.name=grpo"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["steps"] == 3 and printed["credit"]["name"] == "grpo"
    assert printed["run"]["dir"] == str(run_dir) and printed["env"]["name"] == "alfworld-sim"
    assert not run_dir.exists()
    assert main(["train", "--print-config", "credit.name=nope"]) == 2  # a bad config is still the one line


def _run_with_metrics(folder: Path) -> Path:
    folder.mkdir()
    (folder / "metrics.jsonl").write_text(json.dumps({"phase": "eval", "step": 0, "eval/success": 0.5}) + "\n")
    return folder


def test_view_shows_the_environment_and_notes_a_damaged_record(tmp_path):
    run = _run_with_metrics(tmp_path / "run")
    assert "holds no environment.json" in render(run)
    environment.write_environment(run)
    page = render(run)
    cpu = environment.cpu()["model"]
    assert '<h2 id="environment">Environment</h2>' in page and f"cpu: {cpu}" in page
    assert f"numpy=={numpy.__version__}" in page
    for damaged in ("{not json", '["a list"]', '{"packages": "a string"}', '{"gpus": 5}', "[" * 100000):
        (run / "environment.json").write_text(damaged)
        notes: list[str] = []
        render(run, notes=notes)
        assert notes == ["environment.json is not the JSON record prover writes; the environment is not shown"]

"""The command line: `list`, `train --help`, and bad inputs as one-line errors (exit 2).

Every `train` process imports torch before it reads its config (2 s or more on a busy machine), so only
three bad inputs, one per stage that can fail (config names, model folder, checkpoint), and a config file
that is not YAML (an error raised ``from`` its cause) run as real processes, all started at once in one module
fixture; every bad input also runs in-process through ``prover.cli.main``, which is what the process runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from prover.settings.config_text import field_help

CONSOLE_SCRIPT = Path(sys.executable).with_name("prover")

SUBPROCESS_CASES = ("env", "model", "resume", "yaml")
BAD_TRAIN = {
    # case id: (extra argv after `train`, text the one error line must contain)
    "env": (["env.name=nope"], "unknown env 'nope'"),
    "credit": (["credit.name=nope"], "unknown credit assigner 'nope'"),
    "type": (["rollout.group_size=abc"], "'rollout.group_size'"),
    "literal": (["learner.loss_agg=bad"], "'learner.loss_agg'"),
    "model": (["model.path=/nonexistent/folder"], "'/nonexistent/folder' does not exist"),
    "resume": (["--resume"], "no checkpoint"),
    "config": (["--config", "missing.yaml"], "'missing.yaml' does not exist"),
    # raised `from` the YAML error, whose own text spans several lines: only the one message line is printed
    "yaml": (["--config", "bad.yaml"], "'bad.yaml' is not valid YAML at line 2"),
    "malformed": (["nonsense"], "'nonsense' is not of the form section.field=value"),
}

NOT_YAML = "rollout:\n\tgroup_size: 3\n"  # YAML forbids a tab as indentation (line 2)


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    """Run every command of this module concurrently; {case: (returncode, stdout, stderr, run_dir)}."""
    root = tmp_path_factory.mktemp("cli")
    (root / "bad.yaml").write_text(NOT_YAML)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONWARNINGS="ignore")
    commands = {}
    for case in SUBPROCESS_CASES:
        argv = BAD_TRAIN[case][0]
        run_dir = root / f"run-{case}"
        if case == "resume":
            run_dir.mkdir()  # an empty run folder: nothing to resume
        commands[case] = ([sys.executable, "-m", "prover.cli", "train", "--run-dir", str(run_dir), *argv], run_dir)
    script = [str(CONSOLE_SCRIPT)] if CONSOLE_SCRIPT.is_file() else [sys.executable, "-m", "prover.cli"]
    commands["list"] = (script + ["list"], None)
    commands["help"] = ([sys.executable, "-m", "prover.cli", "train", "--help"], None)
    procs = {case: (subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True), run_dir)
             for case, (argv, run_dir) in commands.items()}
    results = {}
    for case, (proc, run_dir) in procs.items():
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err += "\n<timed out>"
        results[case] = (proc.returncode, out, err, run_dir)
    results["_root"] = root
    return results


@pytest.mark.slow
def test_list_prints_every_registry_and_grpo(cli):
    code, out, err, _ = cli["list"]
    assert code == 0, err
    lines = out.splitlines()
    for header in ("envs:", "credit:", "judges:", "engines:"):
        assert header in lines
    credit = lines[lines.index("credit:") + 1:lines.index("judges:")]
    assert any(line.split()[0] == "grpo" for line in credit)
    envs = lines[lines.index("envs:") + 1:lines.index("credit:")]
    assert any(line.split()[0] == "alfworld-sim" for line in envs)
    engines = lines[lines.index("engines:") + 1:]
    assert any(line.split()[0] == "hf" for line in engines)


def test_list_names_where_each_name_comes_from(capsys):
    """The second column: ``built-in`` for prover's own table, ``registered in code`` for a register() call,
    ``entry point (<distribution> <version>)`` for an installed plugin."""
    from prover.cli import main
    from prover.registry import ENVS

    ENVS.register("listed-in-code-test", "prover.envs.pivot_sim:PivotSimEnv")
    try:
        assert main(["list"]) == 0
    finally:
        ENVS.unregister("listed-in-code-test")
    out = capsys.readouterr().out.splitlines()  # a name's row is indented 2; a judge's summary, 6
    rows = {line.split()[0]: line for line in out if line.startswith("  ") and not line.startswith("   ")}
    assert rows["alfworld-sim"].split()[1] == "built-in" and rows["grpo"].split()[1] == "built-in"
    assert rows["listed-in-code-test"].split()[1:4] == ["registered", "in", "code"]
    assert not any(line.split()[1] == "code" for line in rows.values())
    plugins = [line for line in rows.values() if " entry point (" in line]
    assert all(line.split()[1:3] == ["entry", "point"] for line in plugins)


@pytest.mark.slow
@pytest.mark.parametrize("case", SUBPROCESS_CASES)
def test_bad_input_is_one_error_line_and_exit_code_2(cli, case):
    code, out, err, _ = cli[case]
    assert "Traceback" not in err and "Traceback" not in out
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("prover: error: "), err
    assert BAD_TRAIN[case][1] in lines[0]
    assert code == 2


@pytest.mark.slow
def test_a_failed_resume_leaves_the_empty_run_folder_empty(cli):
    assert list(cli["resume"][3].iterdir()) == []


@pytest.mark.slow
def test_config_errors_write_nothing(cli):
    assert not cli["env"][3].exists()
    assert not (cli["_root"] / "runs").exists()


@pytest.mark.slow
def test_train_help_lists_every_field_with_its_description(cli):
    code, out, err, _ = cli["help"]
    assert code == 0, err
    assert "rollout.group_size [8]" in out
    for name, default, desc in field_help():
        assert f"  {name} [{default}]" in out, name
        # argparse keeps the epilog as written (RawDescriptionHelpFormatter)
        assert desc in out, name


# -- in-process checks (cheaper than a process each) ------------------------------------------------

@pytest.mark.parametrize("case", sorted(BAD_TRAIN))
def test_main_returns_2_and_prints_one_error_line(capsys, tmp_path, monkeypatch, case):
    from prover.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.yaml").write_text(NOT_YAML)
    argv, expect = BAD_TRAIN[case]
    run_dir = tmp_path / "run"
    if case == "resume":
        run_dir.mkdir()
    assert main(["train", "--run-dir", str(run_dir), *argv]) == 2  # no exception escapes
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("prover: error: ") and expect in err, err
    if case not in ("model", "resume"):  # refused while reading the config: nothing written
        assert not run_dir.exists() and not (tmp_path / "runs").exists()



def test_a_config_error_keeps_its_cause_which_the_cli_leaves_out(tmp_path):
    import yaml

    from prover.config_load import load_config
    from prover.errors import ConfigError

    (tmp_path / "bad.yaml").write_text(NOT_YAML)
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "bad.yaml")
    assert isinstance(err.value.__cause__, yaml.YAMLError)  # kept for a debugger or a traceback in a test
    # several lines in the cause, one in the message: the "yaml" cases show the CLI prints only the message
    assert "\n" in str(err.value.__cause__) and "\n" not in str(err.value)


def test_resume_reads_the_run_folders_own_config(tmp_path):
    from prover.cli import _config, build_parser

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("rollout:\n  group_size: 3\n")
    args = build_parser().parse_args(["train", "--resume", "--run-dir", str(run_dir), "learner.lr=0.5"])
    cfg = _config(args)
    assert cfg.rollout.group_size == 3 and cfg.learner.lr == 0.5 and cfg.run.dir == str(run_dir)


def test_a_numeric_run_dir_is_a_folder_name(tmp_path, monkeypatch):
    from prover.cli import _config, build_parser

    monkeypatch.chdir(tmp_path)
    assert _config(build_parser().parse_args(["train", "--run-dir", "2024"])).run.dir == "2024"


def test_a_bad_model_path_does_not_wipe_an_existing_run(tmp_path, capsys):
    from prover.cli import main

    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / "step-1").mkdir(parents=True)
    (run_dir / "checkpoints" / "step-1" / "state.json").write_text(json.dumps({"step": 1}))
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "phase": "train"}) + "\n")
    assert main(["train", "--run-dir", str(run_dir), "model.path=/nonexistent/folder"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert (run_dir / "metrics.jsonl").is_file()
    assert (run_dir / "checkpoints" / "step-1" / "state.json").is_file()


def test_progress_in_a_log_file_is_printed_as_lines():
    import io

    from rich.console import Console

    from prover.progress import Reporter

    out = io.StringIO()
    report = Reporter(Console(file=out, force_terminal=False))
    with report.task("warm start", total=3) as tick:
        for _ in range(3):
            tick()
    assert "warm start: 3/3" in out.getvalue()  # the last tick always prints, whatever the interval


def test_eval_closes_its_engine_and_envs_however_it_ends(tiny_policy_dir, tmp_path, monkeypatch, capsys):
    """`prover eval` releases what its engine holds (servers, threads, a local model) and closes its envs
    (gymnasium.Env.close), as the trainer closes its engine: after a success and after a failure."""
    from prover.cli import main
    from prover.engines.hf import HFEngine
    from prover.envs.alfworld_sim import AlfworldSimEnv
    from prover.errors import ConfigError

    closed = []
    monkeypatch.setattr(HFEngine, "close", lambda self: closed.append("engine"))
    monkeypatch.setattr(AlfworldSimEnv, "close", lambda self: closed.append("env"))
    argv = ["eval", "--model", str(tiny_policy_dir), f"run.dir={tmp_path / 'run'}", "eval.episodes=2",
            "rollout.max_turns=2", "rollout.sampling.max_new_tokens=4"]
    assert main(argv) == 0, capsys.readouterr().err
    assert "success" in capsys.readouterr().out
    assert closed == ["env", "env", "engine"]  # one env per eval episode, then the engine

    def fail(cfg, rollout):
        rollout.pool.take(1)  # the failure comes after an env was built
        raise ConfigError("the evaluation failed")

    closed.clear()
    monkeypatch.setattr("prover.trainer.evaluate_policy", fail)
    assert main(argv) == 2
    assert capsys.readouterr().err == "prover: error: the evaluation failed\n"
    assert closed == ["env", "engine"]

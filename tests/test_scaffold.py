"""`prover new env|credit|judge NAME`: the package it writes installs, shows in `prover list`, passes its own
contract tests and trains by name; bad requests are one line and write nothing.

The packages are installed with `pip install --target` into a temporary folder that only the subprocesses
see (on PYTHONPATH: importlib.metadata finds their entry points in the .dist-info there), so .venv is
never changed. The subprocesses run concurrently, as in test_cli.py, to keep the module near 30 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import TINY_RUN
from prover.cli import main
from prover.commands.scaffold import render
from prover.registry import AUTOLOAD_OFF_VAR

ROOT = Path(__file__).resolve().parents[1]
NAMES = {"env": "scaf-env", "credit": "scaf_credit", "judge": "scaf-judge"}  # both separators
EXAMPLES = {"env": "dial", "credit": "loo", "judge": "recent"}  # examples/plugins/prover-<name>
BUILD_OUTPUT = ("__pycache__", ".pytest_cache", "build", "dist")  # what installing or testing an example leaves
TIMEOUT_S = 240
# The scaffold's env with its example replaced, as a user replaces the dial with their own game: other
# words, another state key, no training recipe. The generated tests must still pass on it (a
# template that checked the dial's own text, key and recipe, and failed once the dial was gone).
REPLACED = "swapped"
REPLACED_ENV = """

class SwappedEnv(ScaffoldedEnv):
    train_recipe: ClassVar[dict[str, Any]] = {}

    def state_key(self) -> Hashable:
        return ("replaced", *super().state_key())

    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        obs, info = super()._reset(seed, options)
        return obs.replace("dial", "wheel"), info

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = super()._step(action)
        return obs.replace("dial", "wheel"), reward, terminated, truncated, info
"""


def start(argv: list[str], cwd: Path, site: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != AUTOLOAD_OFF_VAR}
    env.update(PYTHONPATH=str(site), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONWARNINGS="ignore")
    return subprocess.Popen([sys.executable, *argv], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory) -> dict:
    """Scaffold one package per kind, install them, then run `prover list`, their own tests and two 1-step
    trainings at once; {case: (returncode, output)} plus the folders."""
    root = tmp_path_factory.mktemp("scaffold")
    dirs = [root / f"prover-{name}" for name in NAMES.values()]
    for (kind, name), folder in zip(NAMES.items(), dirs):
        assert main(["new", kind, name, "--dir", str(folder)]) == 0
    dirs.append(root / f"prover-{REPLACED}")
    assert main(["new", "env", REPLACED, "--dir", str(dirs[-1])]) == 0
    env_py = dirs[-1] / "prover_swapped" / "env.py"
    env_py.write_text(env_py.read_text().replace("class SwappedEnv(", "class ScaffoldedEnv(") + REPLACED_ENV)
    site = root / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                          "--no-index", "--target", str(site), *map(str, dirs)],
                         capture_output=True, text=True, timeout=TIMEOUT_S)
    assert pip.returncode == 0, pip.stderr
    tiny = [*TINY_RUN, "steps=1", f"env.name={NAMES['env']}"]
    commands = {
        "list": ["-m", "prover.cli", "list"],
        "own tests": ["-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *map(str, dirs)],
        "train credit": ["-m", "prover.cli", "train", *tiny, f"credit.name={NAMES['credit']}",
                         f"run.dir={root / 'run-credit'}"],
        "train judge": ["-m", "prover.cli", "train", *tiny, "credit.name=prover",
                        f"judge.name={NAMES['judge']}", "judge.turns=2", "warmstart.enabled=false",
                        f"run.dir={root / 'run-judge'}"],
    }
    procs = {case: start(argv, root, site) for case, argv in commands.items()}
    results: dict = {"root": root, "dirs": dirs}
    for case, proc in procs.items():
        try:
            out, _ = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out = proc.communicate()[0] + "\n<timed out>"
        results[case] = (proc.returncode, out)
    return results


@pytest.mark.slow
def test_prover_list_shows_each_plugin_from_its_entry_point(scaffolded) -> None:
    code, out = scaffolded["list"]
    assert code == 0, out
    for kind, name in NAMES.items():
        dist = f"prover-{name}"
        lines = [line.split() for line in out.splitlines()]
        assert [name, "entry", "point", f"({dist}", "0.1.0)"] in [row[:5] for row in lines], (kind, out)


@pytest.mark.slow
def test_each_package_passes_its_own_tests(scaffolded) -> None:
    code, out = scaffolded["own tests"]
    assert code == 0, out
    passed = [line for line in out.splitlines() if line.startswith("PASSED ")]  # -rA lists every one
    for name in [*NAMES.values(), REPLACED]:
        assert any(f"test_prover_{name.replace('-', '_')}.py::" in line for line in passed), (name, out)
    assert "skipped" not in out, out


def run_record(run: Path) -> tuple[dict, dict]:
    """The run's config.yaml and its step-1 training metrics."""
    config = yaml.safe_load((run / "config.yaml").read_text())
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["phase"] == "train" and r["step"] == 1]
    assert len(train) == 1, rows
    return config, train[0]


@pytest.mark.slow
def test_one_training_step_uses_the_env_and_credit_method_by_name(scaffolded) -> None:
    code, out = scaffolded["train credit"]
    assert code == 0, out
    config, step = run_record(scaffolded["root"] / "run-credit")
    assert (config["env"]["name"], config["credit"]["name"]) == (NAMES["env"], NAMES["credit"])
    assert config["rollout"]["max_turns"] == 6  # the command line's, not the env recipe's 12
    assert "credit/mean_abs_advantage" in step  # logged by the plugin's own assign


@pytest.mark.slow
def test_one_prover_step_uses_the_judge_by_name(scaffolded) -> None:
    code, out = scaffolded["train judge"]
    assert code == 0, out
    config, step = run_record(scaffolded["root"] / "run-judge")
    assert (config["credit"]["name"], config["judge"]["name"]) == ("prover", NAMES["judge"])
    assert config["judge"]["turns"] == 2  # a field only the plugin's Config knows was accepted
    assert step["judge/errors"] == 0.0


@pytest.mark.parametrize("name", ["Dial", "1dial", "my env", "a--b", "b-", "x:y", "a" * 41, ""])
def test_a_bad_name_is_one_line_and_writes_nothing(name, tmp_path, capsys) -> None:
    target = tmp_path / "pkg"
    assert main(["new", "env", name, "--dir", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"prover: error: plugin name {name!r} is not valid") and err.count("\n") == 1, err
    assert not target.exists()


def test_a_taken_name_is_one_line_naming_its_origin(tmp_path, capsys) -> None:
    target = tmp_path / "pkg"
    assert main(["new", "credit", "grpo", "--dir", str(target)]) == 2
    err = capsys.readouterr().err
    assert err == "prover: error: credit assigner name 'grpo' is taken (from code); pick another name\n"
    assert not target.exists()


def test_a_target_that_is_not_an_empty_folder_is_refused_and_left_alone(tmp_path, capsys) -> None:
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    assert main(["new", "judge", "mine", "--dir", str(full)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert [p.name for p in full.iterdir()] == ["keep.txt"] and (full / "keep.txt").read_text() == "mine"
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert main(["new", "judge", "mine", "--dir", str(afile)]) == 2
    assert "is a file" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["new", "judge", "mine", "--dir", str(empty)]) == 0  # an empty folder is fine
    assert (empty / "prover_mine" / "judge.py").is_file()


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_the_examples_are_what_prover_new_writes(kind) -> None:
    """docs/plugins.md walks through examples/plugins/; they must stay the scaffold's output, file for file:
    a change to the scaffold's templates fails here until the examples are written again with `prover new`."""
    folder = ROOT / "examples" / "plugins" / f"prover-{EXAMPLES[kind]}"
    written = render(kind, EXAMPLES[kind])
    present = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()
                     and not any(part in BUILD_OUTPUT or part.endswith(".egg-info") for part in p.parts))
    assert present == sorted(written), f"{folder} holds other files than `prover new {kind}`"
    for rel, text in written.items():
        assert (folder / rel).read_text() == text, f"{folder / rel} differs from `prover new {kind}`"

"""Every script under benchmarks/ still runs, so none rots unnoticed: each module imports, every first-party
name it imports (inside functions too) exists, each runnable one answers --help, the ones whose tiny real run
takes seconds run it into a temporary folder, and each shell script parses and answers --help.

The scripts are found by globbing, so a new one is covered as soon as it exists; a runnable one must also be
named in SMOKE (its tiny run's arguments) or HELP_ONLY (why a real run needs more than CI has).
In-process where possible (one python and one torch for all of them): ``main()`` with ``sys.argv`` set."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import random
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.rglob("*.py") if p.name != "__init__.py")
SHELL_SCRIPTS = sorted(BENCHMARKS.rglob("*.sh"))
FIRST_PARTY = ("prover", "benchmarks")

# module -> the arguments of its tiny real run ({tmp} is the test's temporary folder, and the run's working
# directory is the repository root); seconds each
SMOKE = {
    "benchmarks.conformance.credit_vs_reference": ["--no-fetch", "--repeats", "1"],  # ours only: no reference here
    "benchmarks.figures.docs": ["--check"],  # draws every figure from the committed results, writes nothing
    "benchmarks.figures.notebook": ["--check"],  # compares docs/tutorial.md's code with the notebook's
    "benchmarks.perf.bandwidth": ["--smoke", "--out", "{tmp}/bandwidth.json"],
    "benchmarks.perf.decode_vs_llama": ["--smoke"],  # prover's side only, the tiny policy
    "benchmarks.perf.credit_speed": ["--groups", "2", "--group-size", "2", "--max-turns", "6"],
    "benchmarks.perf.env_speed": ["--steps", "50", "--real-steps", "5"],
    "benchmarks.perf.kernel_rows": ["--smoke", "--out", "{tmp}/kernel-rows.json"],
    "benchmarks.perf.kv_cache": ["--models", "tiny", "--episodes", "2", "--turns", "2", "--new-tokens", "2",
                                 "--obs-tokens", "4", "--out", "{tmp}/kv_cache.json"],
    "benchmarks.perf.logprob_match": ["--smoke", "--out", "{tmp}/logprob-match.json"],
    "benchmarks.perf.learner_limit": ["--smoke", "--out", "{tmp}/learner-limit.json"],
    "benchmarks.perf.learner_levers": ["--smoke", "--out", "{tmp}/learner-levers.json"],
    "benchmarks.perf.learner_sequences": ["--models", "tiny", "--episodes", "2", "--turns", "2", "--first", "10",
                                          "--observation", "4", "--completion", "2", "--repeats", "1"],
    "benchmarks.perf.page": ["--check"],
    "benchmarks.perf.stopped_rows": ["--smoke"],  # the tiny policy, 4 rows; writes into a temporary folder
    "benchmarks.perf.retrieval": ["--backends", "bm25", "--questions", "5", "--one-by-one", "5", "--n-kbs", "1"],
    "benchmarks.studies.before_after": ["--config", "benchmarks/configs/bench_interop.yaml", "dir=docs/bench/interop"],
    "benchmarks.studies.gigpo_anchors": ["--episodes", "1", "--tasks", "1", "--max-turns", "3"],
    "benchmarks.studies.judge_truth": ["--sets", "defaults", "--groups", "1", "--out", "{tmp}/judge_truth.md"],
    "benchmarks.studies.pivot_tuning_readout": ["--archived", "--out", "{tmp}/readout.md"],
    "benchmarks.studies.pivot_why": [],  # reads docs/bench/pivot's archived cells
    "benchmarks.studies.testbed_cells": ["--learning"],  # reads docs/bench/testbed's committed cells
    "benchmarks.studies.triage_truth": ["--fake", "--groups", "1", "--out", "{tmp}/triage_truth.md"],
    "benchmarks.studies.verify_agreement": ["--replay", "benchmarks/results/perf/verify-draws.json"],
}
# module -> why only --help runs here (a real run trains, needs a real model, llama.cpp, a GPU or the web)
HELP_ONLY = {
    "benchmarks.checks.device_check": "three `prover train` runs, one under accelerate (tests/test_device_check.py)",
    "benchmarks.checks.soak": "a long train run against a failing judge server (~30 min)",
    "benchmarks.conformance.graphgpo_vs_reference": "the pinned reference files from GitHub (CI has no internet)",
    "benchmarks.conformance.hgpo_vs_reference": "the pinned reference files from GitHub (CI has no internet)",
    "benchmarks.perf.async_rollout": "train runs on two envs, synchronous and asynchronous (~14 min)",
    "benchmarks.perf.bf16": "a real model: SmolLM2-135M-Instruct from `prover convert-gguf`",
    "benchmarks.perf.branch_prefill": "train runs with a real policy, here and in an older revision's checkout",
    "benchmarks.perf.cell_speed": "a bench cell's train runs, here and in an older revision's checkout",
    "benchmarks.perf.chat_step": "a real model's RL steps, here and in an older revision's checkout",
    "benchmarks.perf.env_instances": "two `prover train` processes",
    "benchmarks.perf.limits": "builds and SFT-trains the main job's policy, then RL steps (~7 min)",
    "benchmarks.perf.main_job": "run.py's child: the README's main job (~23 min)",
    "benchmarks.perf.main_job_recipes": "train runs of the main job's recipes (~5 min a row)",
    "benchmarks.perf.micro_batch_memory": "RL updates of SmolLM2-135M in child processes (GBs of memory)",
    "benchmarks.perf.prefix_sharing": "three shapes of 16-prompt calls, sharing on and off, each warmed up: "
                                      "20 s and more at its smallest (kv_cache's smoke run covers the engine)",
    "benchmarks.perf.prover_overhead": "train runs per env and judge (~10 min)",
    "benchmarks.perf.run": "every section of docs/perf.md (~100 min)",
    "benchmarks.perf.step_ratio": "a real model's RL steps, here and in an older revision's checkout",
    "benchmarks.perf.sft_levers": "builds and trains the main job's policy; writes results/perf/ only",
    "benchmarks.perf.step_overhead": "a train run (a minute and a half for one step)",
    "benchmarks.studies.lora_vs_full": "SmolLM2-135M train runs, LoRA and full",
}
# smoke runs that build or train a model (the `slow` marker's rule)
SLOW_SMOKE = {"benchmarks.perf.credit_speed", "benchmarks.perf.decode_vs_llama", "benchmarks.perf.kv_cache",
              "benchmarks.perf.learner_limit", "benchmarks.perf.learner_levers",
              "benchmarks.perf.learner_sequences", "benchmarks.perf.logprob_match"}


def module_of(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def runnable(path: Path) -> bool:
    """Whether the file has an ``if __name__ == "__main__":`` block (the rest are helpers, imported only)."""
    return any(isinstance(node, ast.If) and ast.unparse(node.test) in ('__name__ == "__main__"',
                                                                       "__name__ == '__main__'")
               for node in ast.parse(path.read_text()).body)


RUNNABLE = [module_of(p) for p in SCRIPTS if runnable(p)]


def fallbacks(tree: ast.Module) -> set[int]:
    """ids of the import nodes in the handler of a ``try`` that catches ImportError: the fallback for an older
    revision's layout (the scripts that time an older tree run it), which this tree need not have. The
    ``try`` body's own import is this tree's and is checked."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                h.type is None or any(n in ast.unparse(h.type) for n in ("ImportError", "ModuleNotFoundError",
                                                                          "Exception"))
                for h in node.handlers):
            found |= {id(n) for h in node.handlers for n in ast.walk(h) if isinstance(n, ast.Import | ast.ImportFrom)}
    return found


def missing_imports(source: str, module: str) -> list[str]:
    """Each first-party import in ``source`` (at any depth, but not an ImportError fallback) that fails: a module
    that does not import, or a name the module does not have. Lines read 'LINE: from X import Y (why)'."""
    tree = ast.parse(source)
    skip, broken = fallbacks(tree), []
    for node in ast.walk(tree):
        if id(node) in skip or not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.Import):
            wanted = [(alias.name, None) for alias in node.names]
        else:
            package = module.rpartition(".")[0]  # the scripts are modules, never a package's __init__
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) if node.level \
                else node.module or ""
            wanted = [(base, alias.name) for alias in node.names]
        for target, name in wanted:
            if target.split(".")[0] not in FIRST_PARTY:
                continue
            why = unresolved(target, name)
            if why:
                broken.append((node.lineno, f"{node.lineno}: {ast.unparse(node)} ({why})"))
    return [line for _, line in sorted(broken)]


def unresolved(target: str, name: str | None) -> str | None:
    """Why ``import target`` / ``from target import name`` fails, or None when it works."""
    try:
        found = importlib.import_module(target)
    except ImportError as e:
        return f"{type(e).__name__}: {e}"
    if name is None or name == "*" or hasattr(found, name):
        return None
    try:
        importlib.import_module(f"{target}.{name}")
    except ImportError:
        return f"{target} has no {name}"
    return None


def run_main(module: str, args: list[str], monkeypatch) -> object:
    """``python -m module ARGS`` in this process: its ``main()`` where it has one, else the module as __main__.
    What SystemExit carried, or main's return value."""
    monkeypatch.setattr(sys, "argv", [module, *args])
    loaded = importlib.import_module(module)
    try:
        if hasattr(loaded, "main"):
            return loaded.main()
        runpy.run_path(loaded.__file__, run_name="__main__")
    except SystemExit as e:
        return e.code
    return None


@pytest.fixture
def keep_global_state():
    """A script may set torch's thread count or seed its global generators; the tests after it start from
    the count and the generator states they would have had without it."""
    import torch

    threads, torch_rng, python_rng = torch.get_num_threads(), torch.random.get_rng_state(), random.getstate()
    yield
    torch.set_num_threads(threads)
    torch.random.set_rng_state(torch_rng)
    random.setstate(python_rng)


def test_the_glob_finds_the_scripts_and_each_runnable_one_is_classified():
    assert len(SCRIPTS) > 40 and len(RUNNABLE) > 30, "benchmarks/ was not found"
    assert set(SMOKE).isdisjoint(HELP_ONLY), "a script is in both SMOKE and HELP_ONLY"
    unnamed = sorted(set(RUNNABLE) - set(SMOKE) - set(HELP_ONLY))
    assert not unnamed, f"name each in SMOKE (a tiny run's arguments) or HELP_ONLY (why not): {unnamed}"
    gone = sorted((set(SMOKE) | set(HELP_ONLY)) - set(RUNNABLE))
    assert not gone, f"no such runnable script any more: {gone}"


def test_benchmarks_readme_names_every_script():
    readme = (BENCHMARKS / "README.md").read_text()
    files = [*SCRIPTS, *SHELL_SCRIPTS, *sorted(BENCHMARKS.rglob("*.yaml"))]
    unnamed = [str(p.relative_to(BENCHMARKS)) for p in files if f"`{p.relative_to(BENCHMARKS)}" not in readme]
    assert not unnamed, f"benchmarks/README.md has no row for {unnamed}"


@pytest.mark.parametrize("path", SCRIPTS, ids=module_of)
def test_script_imports_and_every_first_party_import_resolves(path):
    module = module_of(path)
    importlib.import_module(module)
    broken = missing_imports(path.read_text(), module)
    assert not broken, f"{path.relative_to(REPO)}:\n" + "\n".join(broken)


@pytest.mark.parametrize("module", RUNNABLE)
def test_script_answers_help(module, monkeypatch, capsys):
    code = run_main(module, ["--help"], monkeypatch)
    out = capsys.readouterr().out
    # argparse prints usage and exits 0; a script with a hand-made entry exits with its usage line instead
    assert (code == 0 and out.startswith("usage:")) or str(code).startswith("usage:"), (code, out[:300])


@pytest.mark.parametrize("module", [pytest.param(m, marks=pytest.mark.slow) if m in SLOW_SMOKE else m
                                    for m in SMOKE])
def test_script_smoke_run(module, tmp_path, monkeypatch, keep_global_state):
    monkeypatch.chdir(REPO)
    # the user's caches stay out of it: no reference files or models found there, no index written there
    monkeypatch.setenv("PROVER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PROVER_INDEX_DIR", str(tmp_path / "indexes"))
    args = [a.replace("{tmp}", str(tmp_path)) for a in SMOKE[module]]
    code = run_main(module, args, monkeypatch)
    assert code in (None, 0), f"{module} {' '.join(args)} ended with {code!r}"
    outs = [a for a in args if a.startswith(str(tmp_path))]
    assert all(Path(a).is_file() for a in outs), f"{module} did not write {outs}"


@pytest.mark.parametrize("path", SHELL_SCRIPTS, ids=lambda p: p.name)
def test_shell_script_parses_and_answers_help(path):
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, timeout=30).returncode == 0
    proc = subprocess.run(["bash", str(path), "--help"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and proc.stdout.startswith("usage:"), proc.stdout + proc.stderr


def test_missing_imports_sees_a_moved_name_inside_a_function_and_spares_an_old_revisions_fallback():
    source = ("from prover.errors import ProverError\n"
              "def f():\n    from prover.rollout import no_such_name\n"
              "def g():\n    try:\n        from prover.errors import ProverError\n    except ImportError:\n"
              "        from prover.no_such_module import ProverError\n"
              "    try:\n        import prover.gone\n    except ImportError:\n        pass\n"
              "import json, numpy.no_such_module\n"
              "from .results import RESULTS, NOTHING\n")
    assert missing_imports(source, "benchmarks.perf.example") == [
        "3: from prover.rollout import no_such_name (prover.rollout has no no_such_name)",
        "10: import prover.gone (ModuleNotFoundError: No module named 'prover.gone')",
        "14: from .results import RESULTS, NOTHING (benchmarks.perf.results has no NOTHING)"]

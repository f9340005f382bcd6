"""A run folder is data, never code: a checkpoint's optimizer and RNG state are tensors and plain values
(prover/rundir/checkpoint_state.py), a crafted pickle in a checkpoint runs nothing on --resume or on conversion, an
earlier version's pickle checkpoint gets one line saying how to convert it, and a checkpoint without its
manifest is damaged. Real run folders, a real pickle that would write a marker file if it ever ran."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from prover.cli import main
from prover.rundir.checkpoint_state import load_state, save_state, write_manifest


class _WritesAMarker:
    """Unpickling this calls os.system: exactly what a crafted rng.pt did on `prover train --resume`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _crafted_pickle(path: Path, marker: Path) -> None:
    """In torch's own file format, as torch.save writes it: what torch.load(weights_only=False) executes."""
    torch.save({"torch": _WritesAMarker(marker), "learner": None}, path)


@pytest.fixture(scope="module")
def two_step_run(tmp_path_factory):
    from conftest import TINY_RUN

    folder = tmp_path_factory.mktemp("data-only") / "run"
    assert main(["train", *TINY_RUN, "steps=2", f"run.dir={folder}"]) == 0
    return folder


@pytest.fixture
def run(two_step_run, tmp_path):
    """A private copy of the two-step run, to tamper with."""
    return Path(shutil.copytree(two_step_run, tmp_path / "run"))


def test_state_round_trips_through_json_and_safetensors(tmp_path):
    tensors = {"a": torch.arange(6.0).reshape(2, 3), "b": torch.tensor(3), "bytes": torch.ByteTensor([1, 255])}
    tree = {0: {"step": tensors["b"], "exp_avg": tensors["a"]}, "groups": [{"lr": 1e-3, "betas": (0.9, 0.999),
            "foreach": None, "amsgrad": False, "params": [0, 1]}], "rng": (3, tuple(range(5)), None),
            "tensor": "a user's key that reads like a marker", "odd": {"tuple": [1, 2]}}
    save_state(tree, tmp_path, "state")
    back = load_state(tmp_path, "state")
    assert back.keys() == tree.keys() and torch.equal(back[0]["exp_avg"], tensors["a"])
    assert back[0]["step"].dtype == torch.int64 and int(back[0]["step"]) == 3
    assert back["groups"][0]["betas"] == (0.9, 0.999) and back["groups"][0]["foreach"] is None
    assert back["rng"] == (3, (0, 1, 2, 3, 4), None) and back["odd"] == {"tuple": [1, 2]}
    assert back["tensor"] == tree["tensor"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json", "state.safetensors"]
    with pytest.raises(TypeError, match="cannot store a _WritesAMarker"):
        save_state({"x": _WritesAMarker(tmp_path / "m")}, tmp_path, "bad")


def test_an_adamw_state_restores_the_same_next_update(tmp_path):
    def model_and_opt():
        torch.manual_seed(0)
        m = torch.nn.Linear(3, 2)
        return m, torch.optim.AdamW(m.parameters(), lr=0.1)

    def step(m, opt):
        opt.zero_grad()
        m(torch.ones(1, 3)).pow(2).sum().backward()
        opt.step()

    m1, o1 = model_and_opt()
    step(m1, o1)
    save_state(o1.state_dict(), tmp_path, "optimizer")
    m2, o2 = model_and_opt()
    m2.load_state_dict(m1.state_dict())
    o2.load_state_dict(load_state(tmp_path, "optimizer"))
    step(m1, o1), step(m2, o2)
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))


@pytest.mark.slow
def test_a_crafted_rng_pickle_runs_no_code_on_resume_or_conversion(run, tmp_path, capsys):
    marker = tmp_path / "ran"
    ckpt = run / "checkpoints" / "step-2"
    for name in ("rng.json", "rng.safetensors"):
        (ckpt / name).unlink()
    _crafted_pickle(ckpt / "rng.pt", marker)
    write_manifest(ckpt)  # the attacker rewrote the manifest to match
    config = (run / "config.yaml").read_text()
    assert main(["train", "--resume", "--run-dir", str(run), "steps=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rng.pt, a pickle from an earlier prover, which is never read" in err[0], err
    assert f"prover convert-checkpoint {ckpt}" in err[0]
    assert not marker.exists() and (run / "config.yaml").read_text() == config  # nothing ran, nothing changed
    torch.save({"state": {}, "param_groups": []}, ckpt / "optimizer.pt")
    before = {p.name: p.read_bytes() for p in ckpt.iterdir()}
    assert main(["convert-checkpoint", str(ckpt)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rng.pt' is not plain tensors and values, so it is not converted" in err[0], err
    assert "posix.system" in err[0] and "weights_only` set to `False`" not in err[0]
    assert not marker.exists() and {p.name: p.read_bytes() for p in ckpt.iterdir()} == before


@pytest.mark.slow
def test_a_checkpoint_without_a_manifest_is_damaged_and_the_previous_one_is_used(run, tmp_path, capsys):
    marker = tmp_path / "ran"
    ckpt = run / "checkpoints" / "step-2"
    (ckpt / "manifest.json").unlink()
    _crafted_pickle(ckpt / "rng.pt", marker)
    assert main(["train", "--resume", "--run-dir", str(run), "steps=3"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "checkpoint step-2 is damaged (manifest.json is missing); resuming from step-1 instead" in out
    assert not marker.exists()
    steps = [(r["phase"], r["step"]) for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]
    assert steps == [("eval", 0), ("train", 1), ("train", 2), ("train", 3), ("eval", 3)]


@pytest.mark.slow
def test_an_earlier_versions_checkpoint_gets_one_line_and_converts(run, capsys):
    ckpt = run / "checkpoints" / "step-2"
    states = {stem: load_state(ckpt, stem) for stem in ("optimizer", "rng")}
    for stem, state in states.items():  # the files as earlier versions wrote them: torch.save of the same state
        torch.save(state, ckpt / f"{stem}.pt")
        (ckpt / f"{stem}.json").unlink(), (ckpt / f"{stem}.safetensors").unlink()
    write_manifest(ckpt)
    assert main(["train", "--resume", "--run-dir", str(run), "steps=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "optimizer.pt, a pickle from an earlier prover" in err[0]
    assert "convert-checkpoint" in err[0]
    assert main(["convert-checkpoint", str(ckpt)]) == 0
    assert not (ckpt / "optimizer.pt").exists() and (ckpt / "rng.json").is_file()
    assert main(["train", "--resume", "--run-dir", str(run), "steps=3"]) == 0, capsys.readouterr().err
    assert "resuming from" not in capsys.readouterr().out  # step-2 itself, intact after conversion
    steps = [(r["phase"], r["step"]) for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]
    assert steps == [("eval", 0), ("train", 1), ("train", 2), ("eval", 2), ("train", 3), ("eval", 3)]


def test_no_code_in_the_tree_reads_a_pickle():
    """Every loader of a file a user could be handed: torch.load only with weights_only=True, and no pickle,
    joblib, dill, shelve or numpy loads that allow pickles (bm25s, faiss and safetensors read data formats).
    One exception, by name: ``from_peer`` of prover/episodes/async_rollout.py reads the OS pipe between the trainer and
    the rollout worker it started (never a file); its body is that one call and nothing else unpickles."""
    import ast

    root = Path(__file__).resolve().parents[1]
    found = []
    for path in [*root.glob("prover/**/*.py"), *root.glob("plugins/*/*/**/*.py"), *root.glob("benchmarks/**/*.py")]:
        tree = ast.parse(path.read_text())
        if path == root / "prover" / "episodes" / "async_rollout.py":
            [peer] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "from_peer"]
            assert ast.unparse(peer.body[-1]) == "return pickle.loads(data)" and len(peer.body) == 2  # doc, return
            tree.body.remove(peer)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) else [])
                if any((n or "").split(".")[0] in ("joblib", "dill", "shelve", "cloudpickle") for n in names):
                    found.append(f"{path.name}:{node.lineno} imports {names}")
            if not isinstance(node, ast.Call):
                continue
            call = ast.unparse(node.func)
            words = {k.arg: ast.unparse(k.value) for k in node.keywords}
            if call.endswith(("pickle.load", "pickle.loads", "Unpickler")):
                found.append(f"{path.name}:{node.lineno} {call}")
            if call == "torch.load" and words.get("weights_only") != "True":
                found.append(f"{path.name}:{node.lineno} torch.load without weights_only=True")
            if words.get("allow_pickle") == "True":
                found.append(f"{path.name}:{node.lineno} allow_pickle=True")
    assert found == []

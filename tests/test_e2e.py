"""End to end: the tiny model trains on each embedded env and on a plugin env, and something real
happens (finite loss, weights change, metrics and checkpoints written, a checkpoint reloads, resume
after a kill keeps the metrics history exact)."""

from __future__ import annotations

import json
import math
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import prover.registry
from prover.config_load import load_config
from prover.judges.random_judge import RandomJudge
from prover.trainer import Trainer

pytestmark = pytest.mark.slow  # every test here trains the tiny model or runs `prover train`


def _history(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _built_models(folder: Path) -> list[str]:
    """The model folders and the digest file; the build locks beside them (``.<name>.lock``) are not models."""
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(".lock"))


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


@pytest.mark.parametrize("env_name", ["alfworld-sim", "webshop-sim", "searchqa-sim", "textmaze"])
def test_train_end_to_end(env_name, tiny_run_overrides, tmp_path):
    cfg = load_config(None, tiny_run_overrides + [f"env.name={env_name}", "steps=2", "learner.lr=5e-3"])
    Trainer(cfg).train()
    run = tmp_path / "run"
    hist = _history(run)
    assert [(r["phase"], r["step"]) for r in hist] == [("eval", 0), ("train", 1), ("train", 2), ("eval", 2)]
    for r in hist:
        if r["phase"] == "train":
            assert all(math.isfinite(v) for v in r.values() if isinstance(v, float))
            assert r["cost/rollout_tokens"] > 0
    assert (run / "config.yaml").is_file()
    ckpt = run / "checkpoints" / "step-2"
    state = {"optimizer.json", "optimizer.safetensors", "rng.json", "rng.safetensors", "manifest.json"}
    assert state <= {p.name for p in ckpt.iterdir()}
    assert not list(ckpt.glob("*.pt"))  # no pickle in a run folder
    warm = next((run / "models").glob("warmstart-*"))
    base = next((run / "models").glob("base-*"))
    w0, w1, w2 = _weights(base), _weights(warm), _weights(ckpt)
    assert any(not torch.equal(w0[k], w1[k]) for k in w0), "the warm start changed no weight"
    if any(r.get("learner/rows", 0) > 0 for r in hist):  # RL had a non-zero advantage to learn from
        assert any(not torch.equal(w1[k], w2[k]) for k in w1), "RL changed no weight"
    from prover.engines.hf import HFEngine

    engine = HFEngine(ckpt)  # the checkpoint is a loadable policy folder
    assert engine.tokenizer.eos_token_id is not None


def test_unchanged_settings_reuse_the_built_models(tiny_run_overrides, tmp_path):
    cfg = load_config(None, tiny_run_overrides + ["steps=0"])
    Trainer(cfg).train()
    models = _built_models(tmp_path / "run" / "models")
    Trainer(cfg).train()
    assert _built_models(tmp_path / "run" / "models") == models
    cfg2 = load_config(None, tiny_run_overrides + ["steps=0", "warmstart.random_action_share=0.5"])
    Trainer(cfg2).train()
    after = _built_models(tmp_path / "run" / "models")
    assert len(after) == len(models) + 1, "a changed warm-start setting must not reuse the old warm start"


def _cli(args: list[str], **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "prover.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kw)


def test_killed_run_resumes_with_exact_history(tiny_run_overrides, tmp_path):
    steps = ["steps=4", "run.keep_checkpoints=5"]
    # Reference: the same run, never interrupted.
    ref_dir = tmp_path / "ref"
    ref = _cli(["train", *tiny_run_overrides, *steps, f"run.dir={ref_dir}"])
    # The run to kill, started at the same time (the machine has two cores).
    run_dir = tmp_path / "run"
    proc = _cli(["train", *tiny_run_overrides, *steps])
    deadline = time.time() + 300
    while time.time() < deadline:
        done = [r for r in _history(run_dir)] if (run_dir / "metrics.jsonl").is_file() else []
        if any(r["phase"] == "train" and r["step"] == 2 for r in done):
            break
        if proc.poll() is not None:
            pytest.fail(f"run ended before it could be killed:\n{proc.stdout.read()}")
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # mid-run: maybe during step 2's checkpoint, maybe in step 3
    proc.wait()
    resumed = _cli(["train", "--resume", "--run-dir", str(run_dir)])
    out, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out
    ref_out, _ = ref.communicate(timeout=300)
    assert ref.returncode == 0, ref_out
    got, want = _history(run_dir), _history(ref_dir)
    assert [(r["phase"], r["step"]) for r in got] == [(r["phase"], r["step"]) for r in want]
    for a, b in zip(got, want):  # same tasks, same sampling seeds, same weights: same outcomes
        for key in ("rollout/success", "rollout/turns", "cost/rollout_tokens", "eval/success"):
            if key in b:
                assert a[key] == pytest.approx(b[key]), (a["step"], key)


def test_a_resume_runs_the_evaluation_its_checkpoint_step_still_owes(tiny_run_overrides, tmp_path):
    """A run stopped after step 1's checkpoint but before step 1's evaluation gets that evaluation on resume,
    with the value an uninterrupted run logs there (same weights, same evaluation seeds)."""
    cfg = load_config(None, tiny_run_overrides + ["steps=2", "eval.every=1", "run.keep_checkpoints=5"])
    Trainer(cfg).train()
    run = tmp_path / "run"
    full = _history(run)
    assert [(r["phase"], r["step"]) for r in full] == [("eval", 0), ("train", 1), ("eval", 1), ("train", 2),
                                                      ("eval", 2)]
    # the state of a run stopped during step 1's evaluation: its checkpoint on disk, no evaluation logged
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in full[:2]))
    shutil.rmtree(run / "checkpoints" / "step-2")
    Trainer(cfg, resume=True).train()
    got = _history(run)
    assert [(r["phase"], r["step"]) for r in got] == [(r["phase"], r["step"]) for r in full]
    assert got[2]["eval/success"] == pytest.approx(full[2]["eval/success"])


def test_resume_without_checkpoint_is_one_line(tmp_path):
    proc = _cli(["train", "--resume", "--run-dir", str(tmp_path / "empty")])
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert out.strip().count("\n") == 0 and "no checkpoint" in out and "Traceback" not in out


def test_every_logged_metric_is_documented(tiny_run_overrides, tmp_path):
    """Every name in metrics.jsonl has a row in the metrics table of docs/metrics.md."""
    cfg = load_config(None, tiny_run_overrides + ["steps=1"])
    Trainer(cfg).train()
    page = (Path(__file__).resolve().parents[1] / "docs" / "metrics.md").read_text()
    table = page.split("# Metrics\n", 1)[1].split("\n## ", 1)[0]
    names = {k for r in _history(tmp_path / "run") for k in r}
    missing = sorted(n for n in names if f"`{n}`" not in table)
    assert not missing, f"metrics not documented in docs/metrics.md: {missing}"


@pytest.mark.parametrize("method", ["grpo", "gigpo", "spo-chain", "spo-tree", "tree-grpo", "budget-matched-grpo"])
def test_every_credit_method_trains_by_name(method, tiny_run_overrides, tmp_path):
    cfg = load_config(None, tiny_run_overrides + [f"credit.name={method}", "steps=1"])
    Trainer(cfg).train()
    train = [r for r in _history(tmp_path / "run") if r["phase"] == "train"]
    assert len(train) == 1 and all(math.isfinite(v) for v in train[0].values() if isinstance(v, float))
    branches = prover.registry.CREDIT.get(method).needs_snapshots
    assert (train[0]["cost/branch_tokens"] > 0) == branches  # only branching methods spend continuations
    method_obj = prover.registry.CREDIT.get(method).from_train_config(cfg)
    sizes = method_obj.group_sizes(1, cfg.rollout.groups_per_step, cfg.rollout.group_size)
    assert train[0]["rollout/group_size"] == sum(sizes) / len(sizes)


class ClosingRandomJudge(RandomJudge):
    """The random judge, counting how often it is built and closed."""

    built = closed = 0

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        type(self).built += 1

    def close(self) -> None:
        type(self).closed += 1


@pytest.mark.parametrize("judge", ["contrast", "random"])
def test_prover_trains_with_each_judge(judge, tiny_run_overrides, tmp_path):
    name = judge
    if judge == "random":  # the random judge, wrapped to see that the trainer built it from the config and closed it
        name = "random-closing-test"
        prover.registry.JUDGES.register(name, ClosingRandomJudge)
    try:
        cfg = load_config(None, tiny_run_overrides + ["credit.name=prover", f"judge.name={name}", "steps=1",
                                                      "credit.samples=2"])
        trainer = Trainer(cfg)
        assert trainer.ctx.judge is trainer.judge and trainer.judge is not None
        trainer.train()
    finally:
        prover.registry.JUDGES.unregister("random-closing-test")
    if judge == "random":
        # one judge built and closed by the checks before the run folder is touched, one by the trainer
        assert ClosingRandomJudge.built == ClosingRandomJudge.closed == 2
    [train] = [r for r in _history(tmp_path / "run") if r["phase"] == "train"]
    assert all(math.isfinite(v) for v in train.values() if isinstance(v, float))
    assert train["credit/eligible_groups"] >= train["credit/proposals"] >= train["credit/valid_proposals"] \
        >= train["credit/accepted"]
    # K = 2 continuations from each boundary of each verified proposal, and no other branching
    assert train["cost/branch_continuations"] == 2 * 2 * train["credit/valid_proposals"]

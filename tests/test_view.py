"""``prover view``: the trainer keeps groups (with ProVer's checked proposals), and the HTML report shows
them. The report is rendered in headless Chromium: a screenshot, and DOM checks that the judge's
segment is outlined over exactly its turns with its Delta, and that env text is escaped, not markup."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from prover.commands.view import render, write_report
from prover.config import TrainConfig
from prover.config_load import load_config
from prover.credit.base import CreditContext
from prover.credit.prover import ProVer, ProVerConfig
from prover.episodes.branching import BranchResult
from prover.judges.base import Judge
from prover.rundir.samples import saved_groups
from prover.types import JudgeResult, Proposal, Segment

EVIL = "You see a <script>alert(1)</script> mug & a <b>knife</b>\x0b. "
# the browser, under its Debian name first, and the Debian package that brings each missing piece
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
PACKAGES = {"chromium": "chromium", "chromedriver": "chromium-driver"}


def chromium() -> str | None:
    return next(filter(None, map(shutil.which, BROWSERS)), None)


def browser() -> tuple[str | None, str | None, str | None]:
    """(why the headless-Chromium test cannot run here, naming each missing piece, or None; Chromium's path;
    chromedriver's path), looked up now, when a test runs: a browser installed after this module was imported
    is found, and none is ever a None path handed to subprocess. The driver is checked too: without
    ``chromedriver`` selenium would try to download one, which fails offline."""
    found = {"chromium": chromium(), "chromedriver": shutil.which("chromedriver")}
    missing = [name for name, path in found.items() if path is None]
    why = f"needs {' and '.join(missing)} (apt-get install {' '.join(PACKAGES[m] for m in missing)})" if missing \
        else None
    return why, found["chromium"], found["chromedriver"]


def browser_missing() -> str | None:
    return browser()[0]


CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1300,1400"]


def _traj(tid: str, won: bool, n: int, evil: bool = False) -> dict:
    return {"traj_id": tid, "won": won, "return": 1.0 if won else 0.0, "truncated": False, "turns": [
        {"observation": (EVIL if evil else "You are in the kitchen. ") * (6 if t == 0 else 1),
         "completion": f"<action>go to shelf {t}</action>", "action": f"go to shelf {t}",
         "reward": 1.0 if won and t == n - 1 else 0.0, "format_valid": True, "action_valid": True,
         "advantage": 0.5 if won else -0.25} for t in range(n)]}


@pytest.fixture
def hand_run(tmp_path) -> Path:
    """A run folder written by hand: three evaluations and steps, and three kept groups whose proposals
    were accepted (Delta +0.25 over turns 1-2 of t0), rejected (Delta -0.5) and dropped (out of range)."""
    run = tmp_path / "run"
    run.mkdir()
    hist = [{"step": 0, "phase": "eval", "eval/success": 0.25, "eval/episodes": 4.0}]
    hist += [{"step": s, "phase": "train", "rollout/success": 0.2 * s, "cost/rollout_tokens": 1000.0 + s,
              "cost/branch_tokens": 200.0, "time/step": 3.0, "credit/acceptance_rate": 0.5} for s in (1, 2, 3)]
    hist.append({"step": 3, "phase": "eval", "eval/success": 0.5, "eval/episodes": 4.0})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in hist))
    groups = [
        {"step": 2, "group": 0, "task_id": "train/17", "task_text": "put a clean <mug> in the sink & leave",
         "trajectories": [_traj("t0", True, 4, evil=True), _traj("t1", False, 5), _traj("t2", False, 3)],
         "segments": [{"traj_id": "t0", "start_turn": 1, "end_turn": 2, "delta": 0.25, "accepted": True,
                       "problem": "", "rationale": "it took the <mug> first"}]},
        {"step": 3, "group": 1, "task_id": "train/18", "task_text": "find a pan",
         "trajectories": [_traj("u0", True, 3), _traj("u1", False, 4)],
         "segments": [{"traj_id": "u0", "start_turn": 0, "end_turn": 0, "delta": -0.5, "accepted": False,
                       "problem": "", "rationale": ""}]},
        {"step": 3, "group": 2, "task_id": "train/19", "task_text": "find a pot",
         "trajectories": [_traj("v0", True, 2), _traj("v1", False, 2)],
         "segments": [{"traj_id": "v0", "start_turn": 0, "end_turn": 9, "delta": None, "accepted": False,
                       "problem": "turns 0..9 are out of range", "rationale": ""}]},
        {"step": 3, "group": 3, "task_id": "train/20", "task_text": "no proposal here",
         "trajectories": [_traj("w0", False, 2)], "segments": []},
    ]
    (run / "groups.jsonl").write_text("".join(json.dumps(g) + "\n" for g in groups))
    (run / "config.yaml").write_text("env: {name: alfworld-sim}\ncredit: {name: prover}\njudge: {name: contrast}\n"
                                     "steps: 3\nseed: 0\n")
    return run


def test_env_text_is_escaped_and_groups_are_picked(hand_run):
    html = render(hand_run)
    assert "<script>alert" not in html and "<b>knife" not in html and "\x0b" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; mug &amp; a &lt;b&gt;knife&lt;/b&gt;" in html
    assert "put a clean &lt;mug&gt; in the sink &amp; leave" in html and "<svg" in html
    assert html.count('class="group"') == 4
    only_two = render(hand_run, most_groups=2)  # groups with a proposal first, shown in step order
    assert only_two.count('class="group"') == 2 and "train/17" in only_two and "train/18" in only_two


MALFORMED_CONFIGS = {"a list": b"- env\n- credit\n", "not UTF-8": b"env: {name: \xff\xfe}\n"}


@pytest.mark.parametrize("config", list(MALFORMED_CONFIGS))
def test_malformed_records_are_skipped_counted_and_the_rest_renders(hand_run, config, capsys):
    """Strings where numbers belong in both files, records that are not mappings, and a config.yaml that is
    a list or not UTF-8: one note each, no traceback, and every good record still on the page."""
    from prover.cli import main

    with (hand_run / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": "four", "phase": "train"}) + "\n" + json.dumps([1, 2]) + "\n")
        f.write(json.dumps({"step": 4, "phase": "eval", "eval/success": "high"}) + "\n")
    bad_group = {"step": 4, "group": 0, "trajectories": [{"traj_id": "x", "return": "lots", "turns": []}]}
    with (hand_run / "groups.jsonl").open("a") as f:
        f.write(json.dumps(bad_group) + "\n" + json.dumps("a string") + "\n")
    (hand_run / "config.yaml").write_bytes(MALFORMED_CONFIGS[config])
    assert main(["view", str(hand_run)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:-1] == ["prover view: note: metrics.jsonl: 2 malformed record(s) skipped (no whole step or phase "
                        "name)",
                        "prover view: note: groups.jsonl: 2 malformed record(s) skipped (a field of the wrong type)",
                        "prover view: note: config.yaml is not a mapping of sections (not YAML, not UTF-8, or a "
                        "list); the run's settings are not shown"]
    html = (hand_run / "report.html").read_text()
    assert html.count('class="group"') == 4 and "0.250 (step 0) → 0.500 (step 3)" in html


def test_missing_run_is_a_one_line_error(tmp_path):
    from prover.cli import main

    assert main(["view", str(tmp_path / "nothing")]) == 2


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


@pytest.mark.parametrize("present, reason", [
    ({"chromium", "chromedriver"}, None),
    ({"chromium-browser", "chromedriver"}, None),
    ({"chromium"}, "needs chromedriver (apt-get install chromium-driver)"),
    ({"chromedriver"}, "needs chromium (apt-get install chromium)"),
    (set(), "needs chromium and chromedriver (apt-get install chromium chromium-driver)"),
], ids=["both", "other-browser-name", "no-driver", "no-browser", "neither"])
def test_the_browser_test_skips_naming_each_missing_piece(monkeypatch, present, reason):
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}" if name in present else None)
    assert browser_missing() == reason


def test_the_browser_is_looked_up_when_the_test_runs_not_at_import(monkeypatch):
    """A browser installed while the suite runs (after this module was imported) is found, never None."""
    monkeypatch.setattr(shutil, "which", lambda name: f"/opt/late/{name}")
    assert browser() == (None, "/opt/late/chromium", "/opt/late/chromedriver")
    assert "CHROMIUM" not in globals()  # no path kept from import time


@pytest.mark.slow
def test_report_renders_in_headless_chromium(hand_run, tmp_path):
    reason, chromium_path, driver_path = browser()
    if reason:
        pytest.skip(reason)
    path = write_report(hand_run)
    shot = tmp_path / "report.png"
    proc = subprocess.run([chromium_path, *CHROME_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                           f"--screenshot={shot}", path.resolve().as_uri()], capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert shot.stat().st_size > 10_000 and _png_size(shot) == (1300, 1400)

    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium_path
    for flag in [*CHROME_FLAGS, f"--user-data-dir={tmp_path / 'profile2'}"]:
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=opts)
    try:
        driver.get(path.resolve().as_uri())
        assert driver.find_elements(By.TAG_NAME, "script") == [] and driver.find_elements(By.TAG_NAME, "b") == []
        [seg] = driver.find_elements(By.CSS_SELECTOR, ".segment.accepted")
        assert seg.get_attribute("data-delta") == "0.25" and "Δ = +0.250 · accepted" in seg.text
        [rejected] = driver.find_elements(By.CSS_SELECTOR, ".segment.rejected")
        assert "Δ = -0.500 · rejected" in rejected.text
        assert driver.find_elements(By.CSS_SELECTOR, ".segment.dropped") == []  # out of range: listed, not drawn
        assert "dropped: turns 0..9 are out of range" in driver.find_element(By.CSS_SELECTOR, "#step-3-group-2").text
        # the outline covers exactly turns 1 and 2 of t0 (the first column of the first group)
        group = driver.find_element(By.CSS_SELECTOR, "#step-2-group-0")
        turns = group.find_elements(By.CSS_SELECTOR, '.turn[data-traj="t0"]')
        assert len(turns) == 4
        box, t1, t2, t3 = seg.rect, turns[1].rect, turns[2].rect, turns[3].rect
        assert abs(box["y"] - t1["y"]) < 2 and abs(box["y"] + box["height"] - t2["y"] - t2["height"]) < 2
        assert box["y"] + box["height"] < t3["y"] + 1 and abs(box["x"] - t1["x"]) < 2
        first_obs = group.find_element(By.CSS_SELECTOR, ".turn .obs").text
        assert first_obs.startswith("You see a <script>alert(1)</script> mug & a <b>knife</b>")
        assert len(driver.find_elements(By.CSS_SELECTOR, "svg.chart")) >= 3
        driver.save_screenshot(str(tmp_path / "selenium.png"))
        assert _png_size(tmp_path / "selenium.png")[0] > 600
    finally:
        driver.quit()


# -- what the trainer keeps ----------------------------------------------------------------------------

class FixedJudge(Judge):
    def propose(self, request):
        return JudgeResult(Proposal(Segment(request.success.traj_id, 1, 2), rationale="because <this>"))


class FixedValues:
    """The Brancher's interface: success 1/4 before turn 1, 3/4 after turn 2 (Delta = +0.5)."""

    def continue_from(self, requests, seed=0):
        rate = {1: 0.25, 3: 0.75}
        return [BranchResult(r, np.array([k < rate[r.turn] * r.n for k in range(r.n)]), 0, [])
                for r in requests]


def test_prover_exposes_checked_segments_and_groups_keep_them(make_batch):
    # group 0 all failed (not eligible), group 1 mixed with a 4-turn success: the judge's segment 1..2
    batch = make_batch([[(False, 2, None), (False, 3, None)], [(True, 4, None), (False, 3, None)],
                        [(True, 2, None), (True, 2, None)]])
    adv = ProVer(ProVerConfig()).assign(batch, CreditContext(TrainConfig(), brancher=FixedValues(),
                                                             judge=FixedJudge(), step=1))
    [seg] = adv.segments
    assert (seg.group, seg.segment.traj_id, seg.segment.start_turn, seg.segment.end_turn) == (1, "g1-t0", 1, 2)
    assert seg.delta == pytest.approx(0.5) and seg.accepted and seg.rationale == "because <this>"
    kept = saved_groups(batch, adv, step=7, n=2)
    assert [k["group"] for k in kept] == [0, 1]  # the proposal's group first, then the first of the rest
    rec = kept[1]
    assert rec["step"] == 7 and rec["segments"] == [{"traj_id": "g1-t0", "start_turn": 1, "end_turn": 2,
                                                     "delta": pytest.approx(0.5), "accepted": True, "problem": "",
                                                     "rationale": "because <this>", "sampled_version": 0,
                                                     "verify_version": None}]  # a stand-in brancher: version unknown
    won = rec["trajectories"][0]
    assert won["won"] and [t["action"] for t in won["turns"]] == ["act 1000", "act 1001", "act 1002", "act 1003"]
    # GRPO mean-centred: 10 - 5 = +5 for the success, bonus 0.5 * 10 on its turns 1-2; -5 for the failure
    assert [t["advantage"] for t in won["turns"]] == pytest.approx([5.0, 10.0, 10.0, 5.0])
    assert [t["advantage"] for t in rec["trajectories"][1]["turns"]] == pytest.approx([-5.0] * 3)
    assert saved_groups(batch, adv, step=7, n=0) == []
    assert [k["group"] for k in saved_groups(batch, adv, step=7, n=1)] == [1]
    json.dumps(kept)  # JSON-ready


@pytest.mark.slow
def test_a_tiny_run_keeps_groups_and_its_report_renders(tiny_run_overrides, tmp_path):
    from prover.trainer import Trainer

    cfg = load_config(None, tiny_run_overrides + ["steps=2", "run.save_groups=1", "credit.samples=2"])
    Trainer(cfg).train()
    kept = [json.loads(line) for line in (tmp_path / "run" / "groups.jsonl").read_text().splitlines()]
    assert [k["step"] for k in kept] == [1, 2]
    assert all(len(k["trajectories"]) == 3 and k["trajectories"][0]["turns"] for k in kept)
    html = render(tmp_path / "run")
    assert html.count('class="group"') == 2 and html.count("<svg") >= 3


def test_resume_and_fresh_start_keep_groups_in_step_with_metrics(tmp_path):
    from prover.rundir.run import RunDir

    run = RunDir(TrainConfig(run={"dir": str(tmp_path / "run")}))
    run.start(fresh=True)
    for step in (1, 2, 3):  # step 3 was logged, then the run died before its checkpoint
        run.log({"step": step, "phase": "train"})
        for g in (0, 1):
            run.log({"step": step, "group": g, "trajectories": [], "segments": []}, run.groups_path)
    run.truncate_history(2)  # what resuming from the step-2 checkpoint does
    kept = [json.loads(line) for line in run.groups_path.read_text().splitlines()]
    assert [(k["step"], k["group"]) for k in kept] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    run.start(fresh=True)  # a new run in the old folder starts without the old groups
    assert not run.groups_path.exists() and not run.metrics_path.exists()

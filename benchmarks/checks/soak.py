"""Soak: a long tiny run against a judge server that fails a share of its requests and an env that raises now
and then. Memory (RSS) and open file descriptors of the trainer must stay flat, and every failure must be
counted: the server's request count equals the sum of ``judge/calls + judge/retries`` over the run, and the
env's raises equal the episodes ended as env errors.

    python -m benchmarks.checks.soak --steps 100 --out benchmarks/results/soak.md

The judge server (127.0.0.1, real HTTP) answers each request, chosen by a seeded draw: a hang past the
client's timeout (``--timeout-share``), 429, 500, or a readable answer-only proposal. The env is pivot-sim
whose ``step`` raises with probability ``--raise-share``. The trainer runs in a subprocess, sampled every
``--every`` seconds from /proc. Figures: RSS and FDs at the first and last sampled step after warm-up, their
peak, and the counts side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

from prover.envs.pivot_sim.env import PivotSimEnv

RAISES_ENV = "PROVER_SOAK_RAISES"  # a file the flaky env appends one line to per raise (the subprocess's count)


class FlakyEnv(PivotSimEnv):
    """pivot-sim whose step raises now and then (share in $PROVER_SOAK_RAISE_SHARE, seeded per env), and whose
    episodes end won by a coin flip: a soak tests plumbing, not learning, and a tiny policy that never wins
    would leave no mixed group for the judge to be asked about."""

    train_recipe: ClassVar[dict] = {}  # the soak's own small settings, not pivot-sim's 600-episode warm start

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._flaky = random.Random(1234 + id(self) % 1000)
        self._share = float(os.environ.get("PROVER_SOAK_RAISE_SHARE", "0.02"))

    def step(self, action):
        if self._flaky.random() < self._share:
            with open(os.environ[RAISES_ENV], "a") as f:
                f.write("raise\n")
            raise RuntimeError("soak: the env failed on purpose")
        obs, reward, term, trunc, info = super().step(action)
        if term or trunc:  # ends as a decided episode, won or lost, never as a truncated one
            won = self._flaky.random() < 0.5
            return obs, float(won), True, False, dict(info, won=won)
        return obs, reward, term, trunc, info


class FlakyJudge(BaseHTTPRequestHandler):
    counts: ClassVar[dict[str, int]] = {}
    draw = random.Random(1)
    shares: tuple[float, float, float] = (0.1, 0.1, 0.1)  # timeout, 429, 500
    hang_s = 2.0
    lock = threading.Lock()

    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        with self.lock:
            x = self.draw.random()
            t, r429, r500 = self.shares
            kind = "timeout" if x < t else "429" if x < t + r429 else "500" if x < t + r429 + r500 else "ok"
            self.counts[kind] = self.counts.get(kind, 0) + 1
        if kind == "timeout":
            time.sleep(self.hang_s)
            return self._send(200, _answer(body))
        if kind in ("429", "500"):
            return self._send(int(kind), {"error": {"message": f"soak {kind}", "type": "soak"}})
        return self._send(200, _answer(body))

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (its timeout)
            pass


def _answer(body: dict) -> dict:
    text = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
    ids = re.findall(r"\b(g\d+-t\d+|t\d+)\b", text)
    proposal = {"traj_id": ids[0] if ids else "t0", "start_turn": 0, "end_turn": 0, "rationale": "soak"}
    return {"id": "soak", "object": "chat.completion", "created": 0, "model": "soak",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": json.dumps(proposal)}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}


def sample(pid: int) -> tuple[float, int] | None:
    try:
        rss_kb = next(int(ln.split()[1]) for ln in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if ln.startswith("VmRSS:"))
        return rss_kb / 1024, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration):
        return None


def run(args: argparse.Namespace) -> str:
    FlakyJudge.shares, FlakyJudge.hang_s = (args.timeout_share, args.share_429, args.share_500), args.timeout_s * 2
    server = ThreadingHTTPServer(("127.0.0.1", 0), FlakyJudge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    tmp = Path(tempfile.mkdtemp(prefix="prover-soak-"))
    raises = tmp / "raises.txt"
    raises.touch()
    run_dir = tmp / "run"
    from benchmarks.checks.tiny_run import TINY_RUN

    # the trainer finds this module (the env) and this tree's prover from the repository root
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])]),
               RAISES_ENV=str(raises),
               PROVER_SOAK_RAISES=str(raises), PROVER_SOAK_RAISE_SHARE=str(args.raise_share),
               PROVER_SOAK_KEY="soak-key", OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    argv = [sys.executable, "-m", "prover.cli", "train", *TINY_RUN, "rollout.group_size=4", "env.kwargs.max_steps=8",
            "rollout.max_turns=9", "credit.eligible=[1,3]", "credit.eligible_of=null",
            "warmstart.episodes=150", "warmstart.epochs=2", "warmstart.random_action_share=0.5",
            f"steps={args.steps}",
            f"run.dir={run_dir}",
            "env.name=benchmarks.checks.soak:FlakyEnv", "credit.name=prover", "judge.name=litellm",
            "judge.model=openai/soak",
            f"judge.api_base=http://127.0.0.1:{server.server_port}/v1", "judge.api_key_env=PROVER_SOAK_KEY",
            "judge.mode=answer-only", f"judge.timeout_s={args.timeout_s}", "judge.max_retries=1",
            "judge.backoff_s=0.01", "judge.max_failed_steps=1000", "rollout.max_env_error_share=1.0",
            "run.save_groups=0", "run.keep_checkpoints=1"]
    # the warm start first, with an env that never raises: the tiny tokenizer's corpus and the expert episodes
    # step the env outside the rollout, where a raise is not an episode's env error; the run then reuses it
    sft = ["sft", *[a for a in argv[4:] if not a.startswith("steps=")]]
    subprocess.run([sys.executable, "-m", "prover.cli", *sft], env=dict(env, PROVER_SOAK_RAISE_SHARE="0"),
                   stdout=subprocess.DEVNULL, check=True)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    samples = []  # (seconds, steps done, rss MiB, fds)
    start = time.monotonic()
    while proc.poll() is None:
        got = sample(proc.pid)
        done = sum(1 for _ in _train_rows(run_dir))
        if got:
            samples.append((time.monotonic() - start, done, *got))
        time.sleep(args.every)
    err = proc.stderr.read()
    server.shutdown()
    rows = list(_train_rows(run_dir))
    evals = int(sum(v for r in _train_rows(run_dir, "eval") for k, v in r.items() if k.endswith("env_errors")))
    return report(args, proc.returncode, err, rows, samples, raises, dict(FlakyJudge.counts), evals)


def _train_rows(run_dir: Path, phase: str = "train"):
    path = run_dir / "metrics.jsonl"
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("phase") == phase:
                yield r


def report(args, rc, err, rows, samples, raises: Path, served: dict[str, int], eval_errors: int) -> str:
    def total(key: str) -> int:
        return int(sum(r.get(key, 0.0) for r in rows))

    warm = [s for s in samples if s[1] >= args.warmup]
    first, last = (warm[0], warm[-1]) if warm else (None, None)
    sent = total("judge/calls") + total("judge/retries")
    kinds = sorted({k for r in rows for k in r if k.startswith("judge/errors/")})
    lines = [f"# Soak: {len(rows)} steps (asked {args.steps}), exit {rc}", "",
             f"`python -m benchmarks.checks.soak --steps {args.steps}`; judge server shares: timeout "
             f"{args.timeout_share}, "
             f"429 {args.share_429}, 500 {args.share_500}; env raise share {args.raise_share} per step call.", "",
             "| figure | value |", "|---|---|"]
    if first:
        lines += [f"| RSS at step {first[1]} / step {last[1]} / peak after step {args.warmup} (MiB) | "
                  f"{first[2]:.0f} / {last[2]:.0f} / {max(s[2] for s in warm):.0f} |",
                  f"| open FDs at step {first[1]} / step {last[1]} / range after step {args.warmup} | "
                  f"{first[3]} / {last[3]} / {min(s[3] for s in warm)}-{max(s[3] for s in warm)} |"]
    lines += [f"| requests the server received / counted (Σ judge/calls + judge/retries) | "
              f"{sum(served.values())} / {sent} |",
              f"| server draws: {', '.join(f'{k} {v}' for k, v in sorted(served.items()))} | |",
              f"| judge/failed_calls, judge/errors, judge/retries | {total('judge/failed_calls')}, "
              f"{total('judge/errors')}, {total('judge/retries')} |",
              f"| judge/errors by kind | {', '.join(f'{k[13:]} {total(k)}' for k in kinds) or 'none'} |",
              f"| env raises / episodes ended as env errors (train + eval) | {len(raises.read_text().splitlines())}"
              f" / {total('rollout/env_errors')} + {eval_errors} |"]
    if rc != 0:
        lines += ["", f"stderr: {' '.join(err.split())[-400:]}"]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10, help="steps before memory and FDs are compared")
    p.add_argument("--timeout-share", type=float, default=0.15)
    p.add_argument("--share-429", type=float, default=0.15)
    p.add_argument("--share-500", type=float, default=0.15)
    p.add_argument("--raise-share", type=float, default=0.01)
    p.add_argument("--timeout-s", type=float, default=0.5, help="the judge client's timeout")
    p.add_argument("--every", type=float, default=1.0, help="seconds between samples")
    p.add_argument("--out", help="also write the report here")
    args = p.parse_args()
    text = run(args)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()

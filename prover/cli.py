"""``prover train | eval | sft | list | check-env | new | serve | bench | view | convert-gguf``. Errors print as one line, never a
traceback."""

from __future__ import annotations

import argparse
import inspect
import sys
import textwrap
from pathlib import Path
from typing import Any

from prover.errors import ProverError

EPILOG_HEAD = "config fields (set as section.field=value; defaults in brackets):"


def _fields_epilog() -> str:
    from prover.config import field_help

    lines = [EPILOG_HEAD]
    for name, default, desc in field_help():
        lines.append(f"  {name} [{default}]\n      {desc}")
    return "\n".join(lines)


def _config(args: argparse.Namespace) -> Any:
    """The config of a command: --config and the overrides; ``--resume`` and ``prover eval`` read the run's
    own config.yaml instead of the defaults, whichever way the run folder is named (--run-dir or run.dir=)."""
    from prover.config import load_config, parse_override

    path, overrides = args.config, list(args.overrides)
    named = [v for k, v in map(parse_override, overrides) if k == "run.dir"]
    run_dir = getattr(args, "run_dir", None) or (str(named[-1]) if named else None)
    run_cfg = Path(run_dir) / "config.yaml" if run_dir else None
    continues = getattr(args, "resume", False) or args.command == "eval"
    if path is None and continues and run_cfg is not None and run_cfg.is_file():
        path = run_cfg  # resuming or scoring a run uses its own config
    cfg = load_config(path, overrides)
    if getattr(args, "run_dir", None):
        cfg.run.dir = str(args.run_dir)  # a folder name, never read as YAML ("2024" stays a string)
    return cfg


def cmd_train(args: argparse.Namespace) -> int:
    cfg = _config(args)  # config errors before torch is imported
    from prover.trainer import Trainer

    Trainer(cfg, resume=args.resume).train()
    return 0


def cmd_sft(args: argparse.Namespace) -> int:
    from prover.envs import make_env
    from prover.policy import prepare_policy
    from prover.progress import Reporter
    from prover.run import RunDir

    cfg = _config(args)
    cfg.warmstart.enabled = True
    run = RunDir(cfg)
    run.start(fresh=False)
    folder = prepare_policy(cfg, run, lambda: make_env(cfg.env.name, **cfg.env.kwargs), Reporter())
    print(f"warm-started policy saved in {folder}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from prover.envs import make_env
    from prover.registry import ENGINES
    from prover.rollout import Rollout
    from prover.run import RunDir
    from prover.seeding import eval_seed
    from prover.trainer import batch_metrics
    from prover.types import SamplingParams

    cfg = _config(args)
    model = args.model or RunDir(cfg).require_checkpoint("prover eval")
    engine = ENGINES.get(cfg.engine.name)(str(model), dtype=cfg.model.dtype, **cfg.engine.kwargs)
    s = cfg.rollout.sampling
    rollout = Rollout(lambda: make_env(cfg.env.name, **cfg.env.kwargs), engine, max_turns=cfg.rollout.max_turns,
                      sampling=SamplingParams(s.max_new_tokens, cfg.eval.temperature, s.top_p, s.top_k),
                      history_window=cfg.rollout.history_window, chat_kwargs=cfg.model.chat_template_kwargs)
    batch = rollout.run(list(range(cfg.eval.episodes)), 1, split=cfg.eval.split, seed=eval_seed(cfg))
    m = batch_metrics(batch)
    print(f"{model}: success {m['rollout/success']:.3f} on {cfg.eval.episodes} {cfg.eval.split!r} episodes "
          f"of {cfg.env.name} (mean turns {m['rollout/turns']:.1f})")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    import prover.credit  # noqa: F401  (registers built-ins)
    import prover.engines  # noqa: F401
    import prover.envs  # noqa: F401
    from prover.registry import REGISTRIES

    for kind, reg in REGISTRIES.items():
        print(f"{kind}:")
        entries = list(reg.entries())
        if not entries:
            print("  (none)")
        for e in entries:
            target = e.target if isinstance(e.target, str) else f"{e.target.__module__}:{e.target.__qualname__}"
            print(f"  {e.name:<22} {e.origin:<40} {target}")
            if kind == "judges":  # what a judge reads (hidden state or not) matters to a comparison
                try:
                    summary = " ".join((inspect.getdoc(e.load()) or "").split("\n\n")[0].split())
                except ProverError as exc:  # a broken plugin is listed with its problem, not fatal
                    summary = f"(does not load: {exc})"
                if summary:
                    print(textwrap.fill(summary, 110, initial_indent=" " * 6, subsequent_indent=" " * 6))
    return 0


def _env_kwargs(texts: list[str]) -> dict[str, Any]:
    """``key=value`` (or ``env.kwargs.key=value``) arguments, each value read as YAML, as in overrides."""
    from prover.config import parse_override
    from prover.errors import ConfigError

    kwargs = {}
    for text in texts:
        try:
            key, value = parse_override(text)
        except ConfigError:
            raise ConfigError(f"env argument {text!r} is not of the form key=value") from None
        key = key.removeprefix("env.kwargs.")
        if "." in key:
            raise ConfigError(f"env argument {text!r}: {key!r} is not a keyword; write key=value")
        kwargs[key] = value
    return kwargs


def cmd_check_env(args: argparse.Namespace) -> int:
    from prover.envs import make_env
    from prover.envs.checker import check_env, check_gymnasium
    from prover.errors import ContractError

    kwargs, stage = _env_kwargs(args.kwargs), "building the env"
    try:
        env = make_env(args.name, **kwargs)  # its errors name the env already
        stage = "checking the env"
        n = check_env(env) + check_gymnasium(env)
    except ContractError as exc:
        raise ContractError(f"{args.name}: {exc}") from exc
    except ProverError:
        raise
    except Exception as exc:  # a plugin's bug, reported like a broken rule: one line, no traceback
        raise ContractError(f"{args.name}: {stage} raised {type(exc).__name__}: "
                            f"{' '.join(str(exc).split())[:200]}") from exc
    print(f"{args.name}: passes the env contract ({n} checks)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(prog="prover", description="RL for LLM agents with fine-grained credit assignment.")
    sub = p.add_subparsers(dest="command", required=True)

    def with_config(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--config", help="YAML config file (sections as in the field list below)")
        sp.add_argument("--run-dir", help="run folder (same as run.dir=...)")
        sp.add_argument("overrides", nargs="*", help="dotted overrides, e.g. rollout.group_size=8")

    t = sub.add_parser("train", help="warm start (optional), then RL", formatter_class=fmt, epilog=_fields_epilog())
    with_config(t)
    t.add_argument("--resume", action="store_true", help="continue the run in run.dir from its last checkpoint")
    t.set_defaults(fn=cmd_train)
    s = sub.add_parser("sft", help="build the policy and run only the warm start", formatter_class=fmt,
                       epilog=_fields_epilog())
    with_config(s)
    s.set_defaults(fn=cmd_sft)
    e = sub.add_parser("eval", help="held-out success of a run's last checkpoint or a model folder",
                       formatter_class=fmt, epilog=_fields_epilog())
    with_config(e)
    e.add_argument("--model", help="a model folder instead of the run's last checkpoint")
    e.set_defaults(fn=cmd_eval)
    ls = sub.add_parser("list", help="every registered env, credit assigner, judge and engine, with its origin")
    ls.set_defaults(fn=cmd_list)
    ce = sub.add_parser("check-env", help="run an env (a registered name or module:Class) through the env "
                        "contract and gymnasium's env checker")
    ce.add_argument("name", help="a registered env name, or package.module:Class")
    ce.add_argument("kwargs", nargs="*", help="the env's arguments as key=value, e.g. max_steps=20")
    ce.set_defaults(fn=cmd_check_env)
    from prover.serve import add_parser as add_serve_parser  # stdlib only: cheap to build

    add_serve_parser(sub)
    from prover.bench.command import add_parser as add_bench_parser
    from prover.view import add_parser as add_view_parser

    from prover.judges.gguf_convert import add_parser as add_convert_parser

    add_bench_parser(sub)
    add_view_parser(sub)
    add_convert_parser(sub)
    from prover.scaffold import add_parser as add_new_parser  # stdlib only until it runs

    add_new_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except ProverError as exc:
        print(f"prover: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a folder that is a file or read-only, a full disk: the OS's reason and the path
        where = f": {exc.filename!r}" if exc.filename else ""
        print(f"prover: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("prover: interrupted; the last checkpoint is intact (resume with --resume)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

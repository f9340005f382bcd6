"""``prover train | eval | sft | list | env | check-env | new | serve | bench | view | convert-gguf | serve-judge |
serve-env``, and ``prover --version``. Errors print as one line, never a traceback.

``serve-env NAME`` serves a prover env over OpenEnv's protocol (``prover/commands/serve_env.py``), for TRL, Unsloth
or any OpenEnv client; it needs the ``openenv`` extra."""

from __future__ import annotations

import argparse
import signal
import sys
import textwrap
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prover.commands.listing import description
from prover.errors import ConfigError, ContractError, ProverError, Stopped
from prover.registry import REGISTRIES
from prover.system.distributed import leave_process_group
from prover.system.stopping import os_error_line, reset, stop_waiting, stopped_line

if TYPE_CHECKING:
    from prover.config import TrainConfig
    from prover.registry import Entry, Registry

EPILOG_HEAD = "config fields (set as section.field=value; defaults in brackets):"


def _fields_epilog(argv: list[str]) -> str:
    # lazy: the field list reads pydantic and the named plugins, only when help is printed
    from prover.plugin_config import recipe_help
    from prover.settings.config_text import field_help

    tree = _help_tree(argv)
    lines = [EPILOG_HEAD]
    for name, default, desc in field_help(tree):
        lines.append(f"  {name} [{default}]\n      {desc}")
    return "\n".join(lines + [""] + recipe_help(tree))


def _help_tree(argv: list[str]) -> dict:
    """The --config file and overrides of a command line that asks for help (argparse prints help before it
    reads them), unchecked; {} when they do not read, so that help still prints, with the defaults."""
    from prover.config_load import read_tree  # lazy: pydantic and the plugins, only when help is printed

    path, overrides, args = None, [], iter(argv)
    for arg in args:
        if arg == "--config":
            path = next(args, None)
        elif arg.startswith("--config="):
            path = arg.partition("=")[2]
        elif "=" in arg and not arg.startswith("-"):
            overrides.append(arg)
    try:
        return read_tree(path, overrides)
    except ProverError:
        return {}


class _Version(argparse.Action):
    """``--version``: the line is made only when asked for (it asks git for the commit)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print prover's version (and its commit, run from a checkout) and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        from prover.system.environment import version_line  # lazy: only --version asks git

        print(version_line())
        parser.exit()


class _Parser(argparse.ArgumentParser):
    """Writes a command's field list only when its help is printed: the list loads the plugins that the
    command line names, too slow for every command."""

    def __init__(self, *args: Any, fields_of: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields_of = fields_of  # the command line, for a command whose help lists the config fields

    def format_help(self) -> str:
        if self.fields_of is not None:
            self.epilog = _fields_epilog(self.fields_of)
        return super().format_help()


def _config(args: argparse.Namespace) -> TrainConfig:
    """The config of a command: --config and the overrides; ``--resume`` and ``prover eval`` read the run's
    own config.yaml instead of the defaults, whichever way the run folder is named (--run-dir or run.dir=)."""
    from prover.config_load import load_config, parse_override  # lazy: loading a config reads pydantic and the plugins

    path, overrides = args.config, list(args.overrides)
    if getattr(args, "run_dir", None) is not None and not args.run_dir.strip():  # --run-dir= or --run-dir ""
        raise ConfigError("--run-dir is empty; name the run's folder, e.g. --run-dir runs/my-run")
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
    if args.print_config:  # what the run's config.yaml would hold; nothing is trained or written
        from prover.settings.config_text import dump_config  # lazy: yaml and pydantic, for --print-config only

        print(dump_config(cfg), end="")
        return 0
    from prover.trainer import Trainer  # lazy: the training stack loads when a run starts

    Trainer(cfg, resume=args.resume).train()
    leave_process_group()
    return 0


def cmd_sft(args: argparse.Namespace) -> int:
    # lazy: the env machinery, the policy and rich load when the command runs
    from prover.envs import make_configured_env
    from prover.policy import prepare_policy
    from prover.progress import Reporter
    from prover.rundir.run import RunDir

    cfg = _config(args)
    cfg.warmstart.enabled = True
    run = RunDir(cfg)
    run.start(fresh=False)
    folder = prepare_policy(cfg, run, lambda: make_configured_env(cfg.env), Reporter())
    print(f"warm-started policy saved in {folder}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    # lazy: the env machinery, the engine and torch load when the command runs
    from prover.config import engine_dtype
    from prover.engines import make_engine
    from prover.envs import make_configured_env
    from prover.learning.lora import is_adapter_checkpoint
    from prover.learning.model_folder import model_spec
    from prover.policy.merged import merged_policy
    from prover.progress import Reporter
    from prover.rundir.run import RunDir
    from prover.system.threads import apply_threads
    from prover.trainer import batch_metrics, build_rollout, evaluate_policy

    cfg = _config(args)
    model = args.model or RunDir(cfg).require_checkpoint("prover eval")
    if is_adapter_checkpoint(model):  # a LoRA run's checkpoint: its base with the adapter merged in
        model = merged_policy(cfg, Path(model), Reporter())
    scored = model_spec(cfg.model.model_copy(update={"path": str(model)}), whole_folder=False)
    apply_threads(cfg.threads, scored.hidden_size)
    engine = make_engine(cfg.engine.name, str(model), dtype=engine_dtype(cfg.model), **cfg.engine.kwargs)
    rollout = None
    try:
        rollout = build_rollout(cfg, engine, lambda: make_configured_env(cfg.env))
        record, batch = evaluate_policy(cfg, rollout)  # the trainer's own evaluation, in one process
    finally:  # however it ends, as the trainer closes its engine (servers, threads, a local model)
        try:
            if rollout is not None:
                rollout.close()
        finally:
            engine.close()
    print(f"{model}: success {record['eval/success']:.3f} on {cfg.eval.episodes} {cfg.eval.split!r} episodes "
          f"of {cfg.env.name} (mean turns {batch_metrics(batch)['rollout/turns']:.1f})")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    listed = {kind: list(reg.entries()) for kind, reg in REGISTRIES.items()}
    width = max((len(e.name) for entries in listed.values() for e in entries), default=0) + 2
    for kind, entries in listed.items():
        reg = REGISTRIES[kind]
        print(f"{kind}:")
        if not entries:
            print("  (none)")
        for e in entries:
            target = e.target if isinstance(e.target, str) else f"{e.target.__module__}:{e.target.__qualname__}"
            print(f"  {e.name:<{width}}{_origin(reg, e):<40} {target}")
            summary = " ".join(description(e.target).split())  # read from source: nothing is imported
            print(textwrap.fill(summary, 110, initial_indent=" " * 6, subsequent_indent=" " * 6))
    return 0


def _origin(reg: Registry, entry: Entry) -> str:
    """Where a name comes from, as `prover list` shows it: ``built-in`` (prover's own table),
    ``registered in code`` (a program's ``register`` call), else the registry's own words
    (``entry point (<distribution> <version>)``)."""
    if entry.origin != "code":  # the registry says "code" for a built-in and a register() call alike
        return entry.origin
    return "built-in" if reg.builtins.get(entry.name) == entry.target else "registered in code"


def _env_kwargs(name: str, texts: list[str]) -> dict[str, Any]:
    """``key=value`` (or ``env.kwargs.key=value``) arguments of env ``name``, each value read as YAML and
    typed by the env's setting, as in overrides."""
    # lazy: pydantic and the env's plugin load when the command runs
    from prover.config_load import parse_override
    from prover.settings.config_overrides import type_overrides_by_field

    kwargs, overrides = {}, []
    for text in texts:
        try:
            key, value = parse_override(text)
        except ConfigError as exc:
            raise ConfigError(f"env argument {text!r} is not of the form key=value") from exc
        key = key.removeprefix("env.kwargs.")
        if "." in key:
            raise ConfigError(f"env argument {text!r}: {key!r} is not a keyword; write key=value")
        kwargs[key] = value
        overrides.append(f"env.kwargs.{key}={text.partition('=')[2]}")
    type_overrides_by_field({"env": {"name": name, "kwargs": kwargs}}, overrides)
    return kwargs


def cmd_check_env(args: argparse.Namespace) -> int:
    # lazy: gymnasium and the env load when the command runs
    from prover.config_load import check_env_settings
    from prover.envs import make_env
    from prover.envs.checker import check_env_report, check_gymnasium

    kwargs, stage = _env_kwargs(args.name, args.kwargs), "building the env"
    check_env_settings(args.name, kwargs)  # the check `prover train` makes of env.kwargs: the same one line
    try:
        isolate = args.isolate_global_rng
        env = make_env(args.name, isolate_global_rng=isolate, **kwargs)  # its errors name the env already
        stage = "checking the env"
        report = check_env_report(env, make_twin=lambda: make_env(args.name, isolate_global_rng=isolate, **kwargs))
        n = report.checks + check_gymnasium(env)
    except ContractError as exc:
        raise ContractError(f"{args.name}: {exc}") from exc
    except ProverError:
        raise
    except Exception as exc:  # a plugin's bug, reported like a broken rule: one line, no traceback
        raise ContractError(f"{args.name}: {stage} raised {type(exc).__name__}: "
                            f"{' '.join(str(exc).split())[:200]}") from exc
    if args.strict and report.blind_line(args.name):  # --strict: a game the checks could not play fails
        raise ContractError(report.blind_line(args.name))
    print(f"{args.name}: passes the env contract ({n} checks)")
    if report.blind_line(args.name):
        print(f"warning: {report.blind_line(args.name)}", file=sys.stderr)
    return 0


def _add_run_parsers(sub: argparse._SubParsersAction, line: list[str]) -> None:
    """``train``, ``sft`` and ``eval``: the commands that take a config, a run folder and dotted overrides."""
    fmt = argparse.RawDescriptionHelpFormatter

    def with_config(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--config", help="YAML config file (sections as in the field list below)")
        sp.add_argument("--run-dir", help="run folder (same as run.dir=...)")
        sp.add_argument("overrides", nargs="*", help="dotted overrides, e.g. rollout.group_size=8")

    t = sub.add_parser("train", help="warm start (optional), then RL", formatter_class=fmt, fields_of=line)
    with_config(t)
    t.add_argument("--resume", action="store_true", help="continue the run in run.dir from its last checkpoint")
    t.add_argument("--print-config", action="store_true", help="print the resolved config (the run's config.yaml "
                   "to be) and exit without training or writing anything")
    t.set_defaults(fn=cmd_train)
    s = sub.add_parser("sft", help="build the policy and run only the warm start", formatter_class=fmt,
                       fields_of=line)
    with_config(s)
    s.set_defaults(fn=cmd_sft)
    e = sub.add_parser("eval", help="held-out success of a run's last checkpoint or a model folder",
                       formatter_class=fmt, fields_of=line)
    with_config(e)
    e.add_argument("--model", help="a model folder instead of the run's last checkpoint")
    e.set_defaults(fn=cmd_eval)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    line = list(sys.argv[1:] if argv is None else argv)  # whose help shows the plugins it names
    p = _Parser(prog="prover", description="RL for LLM agents with fine-grained credit assignment.")
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True)
    _add_run_parsers(sub, line)
    ls = sub.add_parser("list", help="every registered env, credit assigner, judge, engine and retriever, with "
                        "its origin and what it is")
    ls.set_defaults(fn=cmd_list)
    ce = sub.add_parser("check-env", help="run an env (a registered name or module:Class) through the env "
                        "contract and gymnasium's env checker")
    ce.add_argument("name", help="a registered env name, or package.module:Class")
    ce.add_argument("kwargs", nargs="*", help="the env's arguments as key=value, e.g. max_steps=20")
    ce.add_argument("--isolate-global-rng", action="store_true", help="check the env as a run with "
                    "env.isolate_global_rng=true makes it (each instance its own random and numpy RNGs)")
    ce.add_argument("--strict", action="store_true", help="fail (exit 2) when the env listed no admissible "
                    "actions at some of the steps the checks chose, which they then played with 'look' only")
    ce.set_defaults(fn=cmd_check_env)
    from prover.system.environment import add_parser as add_env_parser  # stdlib only until it runs

    add_env_parser(sub)
    from prover.commands.serve import add_parser as add_serve_parser  # stdlib only: cheap to build

    add_serve_parser(sub)
    # lazy: these load numpy and pydantic; importing prover.cli for one command stays light
    from prover.bench.command import add_parser as add_bench_parser
    from prover.commands.view import add_parser as add_view_parser
    from prover.judges.gguf_convert import add_parser as add_convert_parser
    from prover.judges.serve_judge import add_parser as add_serve_judge_parser
    from prover.rundir.checkpoint_state import add_parser as add_convert_checkpoint_parser

    add_bench_parser(sub)
    add_view_parser(sub)
    add_convert_parser(sub)
    add_convert_checkpoint_parser(sub)
    add_serve_judge_parser(sub)
    from prover.commands.serve_env import add_parser as add_serve_env_parser  # openenv is imported only when it runs

    add_serve_env_parser(sub)
    from prover.commands.scaffold import add_parser as add_new_parser  # stdlib only until it runs

    add_new_parser(sub)
    return p


def _raise_stopped(signum: int, frame: object) -> None:
    stop_waiting()  # a network call in flight on another thread gives up now, so the process can exit
    raise Stopped()


def main(argv: list[str] | None = None) -> int:
    args = build_parser(argv).parse_args(argv)
    reset()
    in_main_thread = threading.current_thread() is threading.main_thread()  # only it may set a handler
    previous = signal.signal(signal.SIGTERM, _raise_stopped) if in_main_thread else None
    try:
        return args.fn(args)
    except ProverError as exc:
        print(f"prover: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a folder that is a file or read-only, a full disk: the OS's reason and the path
        print(os_error_line(exc), file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        stop_waiting()  # Ctrl-C too: worker threads waiting on a server give up, so the interpreter can exit
        print(stopped_line("stopped by SIGTERM" if isinstance(exc, Stopped) else "interrupted"), file=sys.stderr)
        return 143 if isinstance(exc, Stopped) else 130
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())

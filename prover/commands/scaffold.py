"""``prover new env|credit|judge NAME [--dir D]``: a pip-installable plugin package that works as written.

The package, in ``./prover-NAME`` unless ``--dir`` names another folder::

    pyproject.toml        distribution prover-NAME (depends on prover-rl), the entry point in its kind's group
    README.md             install, use, test
    prover_NAME/          the plugin: a small working env, credit method or judge (scaffold_templates.py,
                          scaffold_plugin_templates.py)
    tests/test_prover_NAME.py   the kind's contract checks (check_env for an env)

Everything is checked (the name, the folder) and rendered before the first file is written, so a bad
request leaves nothing behind. docs/plugins.md explains what each generated part is for.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path
from string import Template

from prover.commands import scaffold_plugin_templates as plugin_templates
from prover.commands import scaffold_templates as templates
from prover.errors import ConfigError
from prover.registry import REGISTRIES

NAME_PATTERN = re.compile(r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*")
MAX_NAME_CHARS = 40


@dataclass(frozen=True)
class Kind:
    group: str  # entry-point group prover reads
    registry: str  # key in prover.registry.REGISTRIES
    suffix: str  # of the class name: DialEnv, LooCredit, RecentJudge
    code: str
    test: str
    what: str  # for the README


KINDS = {
    "env": Kind("prover.envs", "envs", "Env", templates.ENV_CODE, templates.ENV_TEST, "an env"),
    "credit": Kind("prover.credit", "credit", "Credit", plugin_templates.CREDIT_CODE, plugin_templates.CREDIT_TEST,
                   "a credit method"),
    "judge": Kind("prover.judges", "judges", "Judge", plugin_templates.JUDGE_CODE,
                   plugin_templates.JUDGE_TEST, "a judge"),
}
USAGE = {  # how a run picks the plugin by name
    "env": "prover train env.name=${name}",
    "credit": "prover train credit.name=${name}",
    "judge": "prover train credit.name=prover judge.name=${name}",
}

PYPROJECT = '''\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "${dist}"
version = "0.1.0"
description = "${what_cap} for prover, registered as '${name}'"
readme = "README.md"
requires-python = ">=3.11"
dependencies = ["prover-rl"]

[project.optional-dependencies]
test = ["pytest>=8"]

# The only registration: prover reads this group the first time a name it does not know is asked for.
[project.entry-points."${group}"]
${name} = "${module}:${cls}"

[tool.setuptools]
packages = ["${module}"]

[tool.pytest.ini_options]
testpaths = ["tests"]
'''

INIT = '''\
"""${dist}: ${what} for prover, found through the ${group} entry point '${name}'."""

from ${module}.${kind} import ${cls}

__all__ = ["${cls}"]
'''

README = '''\
# ${dist}

${what_cap} for prover (the `prover-rl` distribution), registered as `${name}` through the
`${group}` entry point. Made by `prover new ${kind} ${name}`; the class is `${module}.${cls}`.

## Install

```bash
pip install -e .            # into the environment that has prover-rl
prover list                 # shows ${name} with origin "entry point (${dist} 0.1.0)"
```

## Use

```bash
${usage}
```

## Test

```bash
pip install -e '.[test]' && pytest
```

The tests run the ${kind} contract checks on the plugin as prover finds it, by name. What each part of
the plugin is for: docs/plugins.md in the prover repository.
'''


def check_name(kind: str, name: str) -> None:
    """A name that can be a registry name, a distribution name and (with '_' for '-') a module name."""
    if kind not in KINDS:
        raise ConfigError(f"unknown plugin kind {kind!r}; choose one of {', '.join(KINDS)}")
    if len(name) > MAX_NAME_CHARS or not NAME_PATTERN.fullmatch(name):
        raise ConfigError(f"plugin name {name!r} is not valid: use at most {MAX_NAME_CHARS} lowercase "
                          "letters and digits, starting with a letter, with single '-' or '_' between them "
                          "(e.g. my-env)")


def check_name_free(kind: str, name: str) -> None:
    """A built-in name would shadow the new plugin (code wins over entry points); an installed one would
    clash with it (two distributions, one name)."""
    registry = REGISTRIES[KINDS[kind].registry]
    taken = {e.name: e.origin for e in registry.entries()}
    if name in taken:
        raise ConfigError(f"{registry.kind} name {name!r} is taken (from {taken[name]}); pick another name")


def check_target(target: Path) -> None:
    """The package folder must not exist, or be an empty folder."""
    if target.exists() and not target.is_dir():
        raise ConfigError(f"target {str(target)!r} is a file; give a folder with --dir")
    if target.is_dir() and any(target.iterdir()):
        raise ConfigError(f"target folder {str(target)!r} exists and is not empty; pick another with --dir")


def fields(kind: str, name: str) -> dict[str, str]:
    k = KINDS[kind]
    title = "".join(part.capitalize() for part in re.split(r"[-_]", name))
    what = k.what
    module = "prover_" + name.replace("-", "_")
    return {"name": name, "kind": kind, "dist": f"prover-{name}", "module": module,
            "title": title, "cls": title + k.suffix, "group": k.group, "what": what,
            "what_cap": what[0].upper() + what[1:], "usage": Template(USAGE[kind]).substitute(name=name)}


def render(kind: str, name: str) -> dict[str, str]:
    """Every file of the package: relative path -> text."""
    f, k = fields(kind, name), KINDS[kind]
    module = f["module"]
    files = {
        "pyproject.toml": PYPROJECT, "README.md": README, f"{module}/__init__.py": INIT,
        f"{module}/{kind}.py": k.code, f"tests/test_{module}.py": k.test,
    }
    return {path: Template(text).substitute(f) for path, text in files.items()}


def scaffold(kind: str, name: str, target: str | Path | None = None) -> Path:
    """Check, render, then write the package; returns its folder."""
    check_name(kind, name)
    folder = Path(target) if target is not None else Path(f"prover-{name}")
    check_target(folder)
    check_name_free(kind, name)  # last: it imports the kind's built-ins (credit imports torch)
    files = render(kind, name)
    for rel, text in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return folder


def cmd_new(args: argparse.Namespace) -> int:
    folder = scaffold(args.kind, args.name, args.dir)
    f = fields(args.kind, args.name)
    what = f"{KINDS[args.kind].what} '{args.name}', class {f['module']}.{f['cls']}"
    print(f"wrote {f['dist']} ({what}) in {folder}\n"
          f"next: pip install -e {folder} && pytest {folder} && prover list")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("new", help="write a pip-installable plugin package: an env, a credit method or judge",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=sorted(KINDS), help="what the plugin is")
    p.add_argument("name", help="its registry name, e.g. my-env (the package is prover-NAME)")
    p.add_argument("--dir", help="the package folder to create [./prover-NAME]")
    p.set_defaults(fn=cmd_new)

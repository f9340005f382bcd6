"""Every public exception of prover, in one hierarchy.

Each message names the bad value, what would have been valid, and the fix. The CLI prints
``ProverError`` subclasses as one line (no traceback); anything else is a bug. ``validation_line`` is the
one spelling of a pydantic ``ValidationError`` as such a line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class ProverError(Exception):
    """Base class: a user-facing error whose message is a complete one-line explanation."""


class NameNotFound(ProverError, KeyError):
    """A registry was asked for a name it does not know."""

    def __str__(self) -> str:  # KeyError would wrap the message in quotes
        return str(self.args[0]) if self.args else ""


class DuplicateName(ProverError):
    """A different object was registered under a name that is already taken."""


class PluginLoadError(ProverError):
    """An entry point or ``module:Object`` target failed to import or load."""


class ContractError(ProverError):
    """An env broke the env contract (see ``prover.envs.check_env``)."""


class CapabilityError(ProverError):
    """A component needs a capability (e.g. snapshots) that another component lacks."""


class ConfigError(ProverError):
    """A config file or override is malformed, mistyped or names an unknown value."""


class NonFiniteError(ProverError):
    """Training met non-finite numbers (NaN or inf) for too many steps in a row, or the weights became so."""


class EnvFaultError(ProverError):
    """An env failed (raised, or broke its contract) in more of a step's episodes than the run allows."""


class EnvTextError(ProverError):
    """An env's text cannot go into the policy's chat as literal text: it changes how the chat template writes
    the turns before it, or holds the tokenizer's own tokens where the template rewrites it. That episode
    ends as an env error; the run goes on."""


class RunFolderError(ProverError):
    """A run folder is held by another process, or cannot be created or written."""


class Stopped(KeyboardInterrupt):
    """SIGTERM (how schedulers and `timeout` stop a job), raised where the process is, so that it unwinds
    exactly as Ctrl-C does: servers stopped, the lock released, the last checkpoint intact."""


class CheckpointError(ProverError):
    """A checkpoint or model folder is missing or unreadable."""


class RetrievalError(ProverError):
    """A retriever could not answer: the server is down, too slow, or sent something unreadable."""


class EngineError(ProverError):
    """An inference server could not serve: it is down, too slow, refused a request, sent something
    unreadable, or a weight sync to it failed."""


class WorkerError(ProverError):
    """The rollout worker process (``rollout.max_off_policy_steps`` > 0) failed, died or stopped answering."""


class JudgeError(ProverError):
    """A judge failed every request of ``judge.max_failed_steps`` steps in a row (a bad key, model or
    server): the run stops rather than train on as plain GRPO."""


def validation_line(exc: ValidationError, *, what: str = "config field", prefix: str = "", owner: str = "",
                    unknown: str = "", at: str | None = None, echo: Callable[[object], str] = repr) -> str:
    """The first error of a pydantic ``ValidationError`` as one line, the one spelling every config, plugin
    setting and structured answer uses: ``config field 'credit.eps' of credit 'grpo': <why> (got 0)``, or for
    a field the model does not have ``unknown config field 'credit.x' for credit 'grpo'<unknown>``.

    ``prefix`` goes before the field's dotted location (``at`` replaces that location; an empty one reads
    ``value``), ``owner`` names the plugin, ``echo`` renders the bad input. With ``what`` empty the field
    is named bare (``start_turn: <why> (got ...)``), as LLM repair messages are.
    """
    err = exc.errors()[0]
    where = at if at is not None else (prefix + ".".join(str(p) for p in err["loc"]) or "value")
    label = f"{what} {where!r}" if what else where
    if err["type"] == "extra_forbidden":
        return f"unknown {label}{f' for {owner}' if owner else ''}{unknown}"
    why = err["msg"].removeprefix("Value error, ")  # pydantic's prefix on a validator's own message
    return f"{label}{f' of {owner}' if owner else ''}: {why} (got {echo(err.get('input'))})"

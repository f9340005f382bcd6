"""Every public exception of prover, in one hierarchy.

Each message names the bad value, what would have been valid, and the fix. The CLI prints
``ProverError`` subclasses as one line (no traceback); anything else is a bug.
"""

from __future__ import annotations


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


class RunFolderError(ProverError):
    """A run folder is held by another process, or cannot be created or written."""


class CheckpointError(ProverError):
    """A checkpoint or model folder is missing or unreadable."""


class RetrievalError(ProverError):
    """A retriever could not answer: the server is down, too slow, or sent something unreadable."""


class EngineError(ProverError):
    """An inference server could not serve: it is down, too slow, refused a request, sent something
    unreadable, or a weight sync to it failed."""


class JudgeError(ProverError):
    """A judge failed every request of ``judge.max_failed_steps`` steps in a row (a bad key, model or
    server): the run stops rather than train on as plain GRPO."""

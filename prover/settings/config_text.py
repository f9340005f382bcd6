"""The run configuration as text: the rows of ``prover train --help`` (every field, then the settings of the
plugins a config names) and the ``config.yaml`` a run folder keeps, with what the credit method derives from it.

These read the registries (plugin settings, the credit method's derived values), which the schema in
``prover/config.py`` never does.
"""

from __future__ import annotations

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from prover.config import TrainConfig
from prover.plugin_config import settings_help
from prover.registry import CREDIT

PLUGIN_SECTIONS = {"env": ("envs", "env.kwargs"), "engine": ("engines", "engine.kwargs"),
                   "credit": ("credit", "credit"), "judge": ("judges", "judge")}  # section: (registry, settings)


def field_help(tree: dict | None = None) -> list[tuple[str, str, str]]:
    """(dotted name, default, description) for every leaf field, each plugin section followed by the
    settings of the plugin that ``tree`` (a config's sections, unchecked) names, else of the default one:
    the text of ``--help``."""
    rows = []
    for section, f in TrainConfig.model_fields.items():
        rows += _leaf_rows(f, section)
        if section in PLUGIN_SECTIONS:
            node = (tree or {}).get(section)
            named = isinstance(node, dict) and "name" in node
            name = node["name"] if named else f.annotation.model_fields["name"].default
            rows += settings_help(*PLUGIN_SECTIONS[section], None if name is None else str(name))
    return rows


def _leaf_rows(f: FieldInfo, name: str) -> list[tuple[str, str, str]]:
    ann = f.annotation
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [row for k, sub in ann.model_fields.items() for row in _leaf_rows(sub, f"{name}.{k}")]
    return [(name, repr(f.get_default(call_default_factory=True)), f.description or "")]


def dump_config(cfg: TrainConfig) -> str:
    """The resolved config as YAML, then what the credit method derives from it (e.g. its effective win
    range) as comments: a reader sees them, loading the file ignores them."""
    text = yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
    derived = CREDIT.get(cfg.credit.name).derived_settings(cfg)
    if derived:
        text += "# derived by the credit method, for the reader (ignored on load):\n"
        text += "".join(f"#   {k}: {v}\n" for k, v in derived.items())
    return text


"""Reading a YAML file a user hands us: safe tags only, bounded in size, no key given twice.

``prover/config.py`` reads every config through ``read_yaml``; each problem is one ConfigError naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from prover.errors import ConfigError

MAX_CONFIG_BYTES = 1 << 20  # a config is a page of settings; a bigger file is a mistake, refused before it is read


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in a mapping (plain YAML keeps the last one silently);
    a merge key's (``<<: *anchor``) keys are the anchor's, so the mapping may override them."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` merges a mapping; its keys may be
                continue                                   # overridden here, as YAML's merge key allows
            key, line = self.construct_object(key_node, deep=True), key_node.start_mark.line + 1
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise ConfigError(f"key {key!r} is given twice (lines {seen[key]} and {line})")
            seen[key] = line
        return super().construct_mapping(node, deep)


def read_yaml(p: Path, what: str) -> Any:
    """The YAML in ``p`` (``what`` names it in errors): size-bounded, UTF-8, safe, no key twice; ConfigError."""
    size = p.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{what} {str(p)!r} has {size} bytes; a config file may have at most "
                          f"{MAX_CONFIG_BYTES} (1 MiB)")
    try:
        return yaml.load(p.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {str(p)!r} is not UTF-8 text (byte {exc.start})") from exc
    except ConfigError as exc:
        raise ConfigError(f"{what} {str(p)!r}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{what} {str(p)!r} is not valid YAML{line}") from exc

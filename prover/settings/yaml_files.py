"""Reading a YAML file a user hands us: safe tags only, bounded in size, no key given twice, and no aliases
that expand past a bound.

``prover/config_load.py`` reads every config through ``read_yaml`` (a file) and ``load_yaml_text`` (an override's
value); each problem is one ConfigError naming the file. An alias (``*a``) is loaded as a shared reference,
so nine levels of nine aliases load in microseconds, yet anything that walks the result (writing
config.yaml, validating a free-form dict, printing it) meets 9**9 nodes and runs for hours; the size a document
would have with every alias written out is therefore counted on the parsed nodes, before anything is built.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

from prover.errors import ConfigError

MAX_CONFIG_BYTES = 1 << 20  # a config is a page of settings; a bigger file is a mistake, refused before it is read
MAX_EXPANDED_NODES = 200_000  # values a config may hold with its aliases written out: a page of settings holds
# hundreds, a 1 MiB file without aliases at most ~500,000 bytes' worth of short scalars; an alias bomb billions


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in a mapping (plain YAML keeps the last one silently);
    a merge key's (``<<: *anchor``) keys are the anchor's, so the mapping may override them."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Hashable, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` merges a mapping; its keys may be
                continue                                   # overridden here, as YAML's merge key allows
            key, line = self.construct_object(key_node, deep=True), key_node.start_mark.line + 1
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise ConfigError(f"key {key!r} is given twice (lines {seen[key]} and {line})")
            seen[key] = line
        return super().construct_mapping(node, deep)


def expanded_size(root: yaml.Node) -> int:
    """How many nodes ``root`` holds with every alias written out in full: each node counted once per path
    that reaches it (memoized per node, so a bomb is sized in time linear in its text). Stops counting past
    the bound. A node that contains itself (a recursive alias) counts as unbounded."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    open_nodes: set[int] = set()
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        kids = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else (
            list(node.value) if isinstance(node, yaml.SequenceNode) else [])
        if children_done:
            open_nodes.discard(id(node))
            sizes[id(node)] = min(MAX_EXPANDED_NODES + 1, 1 + sum(sizes[id(k)] for k in kids))
            continue
        if id(node) in open_nodes:  # reached again while its own children are being counted: it recurses
            return MAX_EXPANDED_NODES + 1
        open_nodes.add(id(node))
        stack.append((node, True))
        stack.extend((k, False) for k in kids if id(k) not in sizes)
    return sizes[id(root)]


def _load(text: str) -> Any:
    """The YAML document in ``text``, through the unique-key loader, refused (ConfigError, no file named)
    when its aliases expand past MAX_EXPANDED_NODES; yaml.YAMLError when it does not parse."""
    loader = _UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if expanded_size(node) > MAX_EXPANDED_NODES:
            raise ConfigError(f"its anchors and aliases (&name, *name) expand to more than {MAX_EXPANDED_NODES} "
                              "values; write the values out, "
                              "or use fewer aliases")
        return loader.construct_document(node)
    except RecursionError:  # the composer and constructor recurse once per nesting level
        raise ConfigError("it nests lists or mappings too deeply to read") from None
    finally:
        loader.dispose()


def load_yaml_text(text: str, what: str) -> Any:
    """``text`` read as YAML (an override's value): safe tags, no key twice, aliases bounded; ConfigError
    naming ``what`` for those, yaml.YAMLError when it does not parse."""
    try:
        return _load(text)
    except ConfigError as exc:
        raise ConfigError(f"{what}: {exc}") from None


def read_yaml(p: Path, what: str) -> Any:
    """The YAML in ``p`` (``what`` names it in errors): size-bounded, UTF-8, safe, no key twice; ConfigError."""
    size = p.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{what} {str(p)!r} has {size} bytes; a config file may have at most "
                          f"{MAX_CONFIG_BYTES} (1 MiB)")
    try:
        return _load(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {str(p)!r} is not UTF-8 text (byte {exc.start})") from exc
    except ConfigError as exc:
        raise ConfigError(f"{what} {str(p)!r}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{what} {str(p)!r} is not valid YAML{line}") from exc

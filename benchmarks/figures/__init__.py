"""The documentation's figures drawn from committed results (``python -m benchmarks.figures.docs``)."""

from __future__ import annotations

import argparse


def render_or_check(doc: str | None, render_help: str, check_help: str, argv: list[str] | None) -> bool:
    """The ``--render | --check`` command line that every generated page and figure shares: True for --check."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--render", action="store_true", help=render_help)
    what.add_argument("--check", action="store_true", help=check_help)
    return ap.parse_args(argv).check

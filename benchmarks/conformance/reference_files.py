"""Reference source files pinned at a commit, for the scripts that run a method's public code beside ours
(``credit_vs_reference.py``, ``hgpo_vs_reference.py``, ``graphgpo_vs_reference.py``). Never committed here:
they are read from ``--reference PATH`` (a checkout, a git directory, or a folder holding the files by name),
else from the cache ``$PROVER_CACHE/reference/<repo>-<commit>`` (default ``~/.cache/prover``), else fetched
into it."""

from __future__ import annotations

import argparse
import os
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np


class PinnedFiles:
    """``files`` (name -> path in ``repo``) at ``commit``, gathered flat into one cache folder."""

    def __init__(self, repo: str, commit: str, files: dict[str, str]):
        self.repo, self.commit, self.files = repo, commit, files

    @property
    def cache(self) -> Path:
        root = Path(os.environ.get("PROVER_CACHE", Path.home() / ".cache" / "prover"))
        return root / "reference" / f"{self.repo.split('/')[-1]}-{self.commit[:12]}"

    def url(self, path: str) -> str:
        return f"https://raw.githubusercontent.com/{self.repo}/{self.commit}/{path}"

    def find(self, path: Path | None, fetch: bool) -> Path | None:
        """The folder holding every file by name: ``path`` itself, or the cache filled from ``path`` (its
        checkout paths, or, for a git directory, the pinned commit) or, with neither and ``fetch``, from
        the web. None (with a line saying why) when they cannot be had."""
        for folder in (path, self.cache):
            if folder is not None and all((folder / name).is_file() for name in self.files):
                return folder
        if path is not None:
            got = self._from_checkout(path) or self._from_git(path)
            if got is None:
                print(f"{path}: neither {' nor '.join(self.files.values())} there, nor at {self.commit[:12]}")
            return got and self._store(got)
        return self._fetch() if fetch else None

    def _from_checkout(self, path: Path) -> dict[str, bytes] | None:
        if all((path / p).is_file() for p in self.files.values()):
            return {name: (path / p).read_bytes() for name, p in self.files.items()}
        return None

    def _from_git(self, path: Path) -> dict[str, bytes] | None:
        if not (path / "HEAD").is_file():
            return None
        got = {}
        for name, p in self.files.items():
            proc = subprocess.run(["git", f"--git-dir={path}", "show", f"{self.commit}:{p}"],
                                  capture_output=True, timeout=60)
            if proc.returncode != 0:
                return None
            got[name] = proc.stdout
        return got

    def _fetch(self) -> Path | None:
        try:
            got = {}
            for name, p in self.files.items():
                with urllib.request.urlopen(self.url(p), timeout=15) as resp:
                    got[name] = resp.read()
        except OSError as e:
            print(f"could not fetch the reference ({e.__class__.__name__}: {e})")
            return None
        return self._store(got)  # only once every file arrived: a failed fetch leaves nothing

    def _store(self, got: dict[str, bytes]) -> Path:
        self.cache.mkdir(parents=True, exist_ok=True)
        for name, data in got.items():
            (self.cache / name).write_bytes(data)
        return self.cache

    def add_arguments(self, ap: argparse.ArgumentParser, what: str) -> None:
        """``--reference PATH`` (``what``: what PATH may be) and ``--no-fetch``, for ``found``."""
        ap.add_argument("--reference", type=Path, help=what)
        ap.add_argument("--no-fetch", action="store_true", help="do not download the reference into the cache")

    def found(self, args: argparse.Namespace, say_how: bool = True) -> Path | None:
        """``find`` as the command line asks; when absent, None after printing how to get the files."""
        folder = self.find(args.reference, fetch=not args.no_fetch)
        if folder is None and say_how:
            print(self.how_to_get())
        return folder

    def how_to_get(self) -> str:
        lines = [f"  curl -fsSL --create-dirs -o {self.cache / name} {self.url(p)}" for name, p in self.files.items()]
        return ("reference absent. Get it with\n" + "\n".join(lines) + f"\nor pass --reference PATH (a checkout or "
                f"git directory of {self.repo}, or a folder with {', '.join(self.files)})")


def side_by_side(ours: Callable[[], np.ndarray], theirs: Callable[[], np.ndarray]
                 ) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Our values and the reference's, one run each (ours first), |ours - theirs| per row and each side's
    milliseconds."""
    t0 = time.perf_counter()
    mine = ours()
    t1 = time.perf_counter()
    reference = theirs()
    t2 = time.perf_counter()
    return mine, np.abs(mine - reference), (t1 - t0) * 1e3, (t2 - t1) * 1e3


def setting_label(setting: dict, default: str = "") -> str:
    """A table's name for one setting of a method: ``k=v, k=v``, or ``default`` when it sets nothing."""
    return ", ".join(f"{k}={v}" for k, v in setting.items()) or default

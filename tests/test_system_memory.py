"""``prover.system.memory``: the host memory free to take, read from the kernel's own estimate."""

from __future__ import annotations

import os

from prover.system.memory import available_bytes


def test_memavailable_is_read_in_kibibytes(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24683836 kB\nMemFree:        14907264 kB\nMemAvailable:   21202240 kB\n")
    assert available_bytes(meminfo) == 21202240 * 1024


def test_without_meminfo_the_free_pages_answer(tmp_path, monkeypatch):
    pages = {"SC_AVPHYS_PAGES": 1000, "SC_PAGE_SIZE": 4096}
    monkeypatch.setattr(os, "sysconf", lambda name: pages[name])
    assert available_bytes(tmp_path / "absent") == 4096 * 1000
    (tmp_path / "odd").write_text("MemAvailable: many\n")
    assert available_bytes(tmp_path / "odd") == 4096 * 1000


def test_a_system_that_says_nothing_gives_none(tmp_path, monkeypatch):
    def refuse(name):
        raise ValueError(name)

    monkeypatch.setattr(os, "sysconf", refuse)
    assert available_bytes(tmp_path / "absent") is None

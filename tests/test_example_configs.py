"""The shipped run configs (examples/configs/*.yaml) stay valid as the config's fields change."""

from __future__ import annotations

from pathlib import Path

import pytest

from prover.config_load import load_config

CONFIGS = sorted((Path(__file__).parent.parent / "examples" / "configs").glob("*.yaml"))


def test_there_are_shipped_configs():
    assert CONFIGS


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_a_shipped_config_loads(path):
    cfg = load_config(path, ["model.path=tiny"])  # the checkpoint folder is not needed to check the rest
    assert cfg.rollout.context in ("chat", "window")
    assert cfg.threads == 1  # they are sized for a shared CPU

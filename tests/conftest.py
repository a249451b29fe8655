"""Shared fixtures: quick measurement settings and a folder for user modules written by tests."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from autotune.measure import Settings

TESTS = Path(__file__).parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


@pytest.fixture
def quick() -> Settings:
    return Settings.quick()


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """Write a module into a fresh folder on sys.path; returns its import name."""
    monkeypatch.syspath_prepend(str(tmp_path))
    counter = {"n": 0}

    def write(source: str, name: str | None = None) -> str:
        counter["n"] += 1
        name = name or f"user_mod_{counter['n']}_{abs(hash(str(tmp_path))) % 10**8}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        return name

    return write

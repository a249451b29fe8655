"""The package's layering as written in pyproject.toml ([tool.importlinter]): no import circles among autotune's
modules (lazy imports count), the layers from the faces down, and only the store importing Optuna's storages. These tests run `lint-imports` on the repository,
and on a copy of it with one import added, to show that each contract fails when that import breaks it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CIRCLES = "No import circles among autotune's modules"
LAYERS = "Layers: the faces"
STORAGES = "Only autotune.store imports optuna.storages"
LINT = "from importlinter.cli import lint_imports_command; lint_imports_command(prog_name='lint-imports')"


def lint(root: Path) -> str:
    """``lint-imports`` with ``root``'s pyproject.toml on the autotune package under ``root``: its report, whitespace
    made single spaces (a long contract name wraps)."""
    out = subprocess.run([sys.executable, "-c", LINT, "--no-cache", "--no-logo", str(root / "pyproject.toml")],
                         cwd=root, capture_output=True, text=True, timeout=300)
    report = " ".join((out.stdout + out.stderr).split())
    assert (out.returncode == 0) == (" BROKEN" not in report), report  # the exit status agrees with the report
    return report


def verdict(report: str, contract: str) -> str:
    """KEPT or BROKEN: what the report says of the contract whose name starts with ``contract``."""
    found = re.search(re.escape(contract) + r".*? (KEPT|BROKEN)\b", report)
    assert found, f"no verdict on {contract!r} in: {report}"
    return found.group(1)


def test_the_import_contracts_hold():
    report = lint(ROOT)
    assert verdict(report, CIRCLES) == "KEPT", report
    assert verdict(report, LAYERS) == "KEPT", report
    assert verdict(report, STORAGES) == "KEPT", report


@pytest.mark.parametrize(("module", "target", "contract", "said"), [
    # A lazy import, inside a function, that closes a circle in the knobs package (core is what registry is written in).
    ("knobs/core.py", "autotune.knobs.registry", CIRCLES, "No cycles are allowed in autotune.knobs. "
                                                          "It could be made acyclic by removing 1 dependency: "
                                                          "- .core -> .registry"),
    # hf (below plan) importing plan closes no circle, but climbs a layer.
    ("hf.py", "autotune.plan", LAYERS, "autotune.hf is not allowed to import autotune.plan"),
    # a read reaching Optuna's storages itself, around the store that owns them
    ("view.py", "optuna.storages", STORAGES, "autotune is not allowed to import optuna.storages"),
])
def test_an_added_import_breaks_its_contract(tmp_path, module, target, contract, said):
    shutil.copytree(ROOT / "autotune", tmp_path / "autotune", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    path = tmp_path / "autotune" / module
    path.write_text(path.read_text() + f"\n\ndef _added() -> None:\n    import {target}  # noqa: F401\n")
    report = lint(tmp_path)
    assert verdict(report, contract) == "BROKEN" and said in report, report

"""The package's layering as written in pyproject.toml ([tool.importlinter]): no import circles among autotune's
modules (lazy imports count), the rooms from the faces down and each room's modules in order (every module in one),
the read side importing neither torch nor the trial side, and only the store importing Optuna's storages. These tests
run `lint-imports` on the repository, and on a copy of it with one import (or one module) added, to show that each
contract fails when that import breaks it."""

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
TRIAL = "Layers inside autotune.trial"
READ_SIDE = "The read side imports neither torch nor the trial side"
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
    assert verdict(report, READ_SIDE) == "KEPT", report
    assert " BROKEN" not in report, report  # every room's inner order too


@pytest.mark.parametrize(("module", "target", "contract", "said"), [
    # A lazy import, inside a function, that closes a circle in the knobs package (core is what registry is written in).
    ("knobs/core.py", "autotune.knobs.registry", CIRCLES, "No cycles are allowed in autotune.knobs. "
                                                          "It could be made acyclic by removing 1 dependency: "
                                                          "- .core -> .registry"),
    # hf (in the workloads, below the trial) importing the plan climbs a layer.
    ("workloads/hf.py", "autotune.trial.plan", LAYERS, "autotune.workloads is not allowed to import autotune.trial: "
                                                       "- autotune.workloads.hf -> autotune.trial.plan"),
    # inside a room: the plan (what a trial applies) reaching up to the runner (the parent's side)
    ("trial/plan.py", "autotune.trial.runner", TRIAL, "autotune.trial.plan is not allowed to import "
                                                      "autotune.trial.runner"),
    # a view importing torch lazily, inside a function: a read command would load it
    ("reports/view.py", "torch", READ_SIDE, "autotune.reports is not allowed to import torch"),
    # the figures reaching the trial side
    ("evidence/verdict.py", "autotune.trial.runner", READ_SIDE, "autotune.evidence is not allowed to import "
                                                                "autotune.trial"),
    # a read reaching Optuna's storages itself, around the store that owns them
    ("reports/view.py", "optuna.storages", STORAGES, "autotune is not allowed to import optuna.storages"),
])
def test_an_added_import_breaks_its_contract(tmp_path, module, target, contract, said):
    shutil.copytree(ROOT / "autotune", tmp_path / "autotune", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    path = tmp_path / "autotune" / module
    path.write_text(path.read_text() + f"\n\ndef _added() -> None:\n    import {target}  # noqa: F401\n")
    report = lint(tmp_path)
    assert verdict(report, contract) == "BROKEN" and said in report, report


def test_a_module_in_no_room_breaks_the_layers(tmp_path):
    """Every module is in the layers: a new module at the top of the package, in none of them, fails the contract."""
    shutil.copytree(ROOT / "autotune", tmp_path / "autotune", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "autotune" / "stray.py").write_text('"""A module nobody placed."""\n')
    report = lint(tmp_path)
    assert verdict(report, LAYERS) == "BROKEN" and "autotune.stray" in report, report


def test_no_module_passes_500_lines_and_no_class_300():
    """A module past 500 lines, or a class past 300, holds more than one concept: it is split by what its callers ask
    (a package, as the dashboard is; a class's parts, as Evidence's and Store's are)."""
    import ast

    long, large = {}, {}
    for p in (ROOT / "autotune").rglob("*.py"):
        text = p.read_text()
        if (n := len(text.splitlines())) > 500:
            long[str(p.relative_to(ROOT))] = n
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and (n := node.end_lineno - node.lineno + 1) > 300:
                large[f"{p.relative_to(ROOT)}:{node.name}"] = n
    assert not long, f"split these modules: {long}"
    assert not large, f"split these classes: {large}"


def test_every_room_says_what_it_holds():
    """Each package of the tree opens with a docstring that says what it is for (a newcomer reads the tree)."""
    import ast

    silent = [str(p.relative_to(ROOT)) for p in (ROOT / "autotune").rglob("__init__.py")
              if not ast.get_docstring(ast.parse(p.read_text()))]
    assert not silent, silent

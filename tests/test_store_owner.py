"""The stored study has one owner: autotune/store/ is the only code that reads or writes Optuna's attributes or
uses Optuna's private names, and every private name it uses is listed, with its reason, in docs/storage.md."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / "autotune" / "store"
DOCS = ROOT / "docs" / "storage.md"

#: Names that only the store may use: Optuna's attribute API and the private names behind it.
STORED_FORMAT = {"user_attrs", "set_user_attr", "system_attrs", "set_system_attr", "set_trial_user_attr",
                 "set_trial_system_attr", "get_study_user_attrs", "get_all_trials"}
#: The stores' own tests read the raw format on purpose (they hold the store to it).
STORE_TESTS = {"test_store.py", "test_store_owner.py", "test_reading.py", "test_postgres.py", "test_kept.py"}


def _outside_the_store() -> list[Path]:
    files = [p for p in (ROOT / "autotune").rglob("*.py") if STORE not in p.parents]
    files += sorted((ROOT / "benchmarks").glob("*.py"))
    files += [p for p in sorted((ROOT / "tests").glob("*.py")) if p.name not in STORE_TESTS]
    return files


def _names(source: str) -> set[str]:
    """The identifiers of a module's code (not its comments or strings)."""
    return {tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.NAME}


def _private(tree: ast.AST) -> set[str]:
    """Private names of other objects a module uses: ``x._name`` (not ``self.``/``cls.``) and imports from
    ``optuna``'s private modules."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.add(node.attr)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("optuna"):
            if any(part.startswith("_") for part in node.module.split(".")):
                found.add(node.module)
            found.update(a.name for a in node.names if a.name.startswith("_"))
    return found


def test_no_module_outside_the_store_touches_optunas_attributes_or_private_names():
    offenders = []
    for path in _outside_the_store():
        source = path.read_text(encoding="utf-8")
        used = _names(source) & STORED_FORMAT
        private = {n for n in _private(ast.parse(source)) if n in ("_storage", "_trial_id", "_study_id", "_backend")
                   or n.startswith("optuna.")}
        if used or private:
            offenders.append(f"{path.relative_to(ROOT)}: {', '.join(sorted(used | private))}")
    assert not offenders, "only autotune/store may read or write the stored format:\n" + "\n".join(offenders)


def test_every_private_optuna_name_the_store_uses_is_listed_with_its_reason():
    listed = DOCS.read_text(encoding="utf-8")
    missing = []
    for path in sorted(STORE.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        own = {n.name for n in ast.walk(tree)
               if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name.startswith("_")}
        own |= {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        for name in sorted(_private(tree) - own):
            if f"`{name}`" not in listed and name not in ("_open", "_attrs", "_evidence", "_identity", "_finished"):
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert not missing, "private Optuna names not listed in docs/storage.md:\n" + "\n".join(missing)


@pytest.mark.parametrize("snippet, caught", [
    ("t.user_attrs.get('role')", True),
    ("study.set_user_attr('x', 1)", True),
    ("study._storage.get_trial(1)", True),
    ("# user_attrs in a comment\n'user_attrs in a string'", False),
])
def test_the_check_sees_what_it_forbids(snippet, caught):
    """The owner check fails on code that reads the format or uses a private name, and not on mere words."""
    used = _names(snippet) & STORED_FORMAT or {n for n in _private(ast.parse(snippet)) if n == "_storage"}
    assert bool(used) is caught

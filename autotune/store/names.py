"""Study names and the default place of a study: the safe set of names, checked before any file is touched.

A study name becomes a file name (``sqlite:///studies/<name>.db``) and a line of output, so
it comes from a documented safe set (:data:`NAME_CHARS`). :func:`kind` names a hardware kind
for the per-kind studies of a fleet's job (``<job>@<kind>``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

from autotune.errors import StudyError
from autotune.request import MAX_NAME

STUDIES_DIR = Path("studies")

NAME_CHARS = "letters, digits and . _ - @"
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._@-]*")


def check_name(name: Any) -> str:
    """``name`` if it is a safe study name, else StudyError (before any file is touched).

    Safe: letters, digits, ``.``, ``_``, ``-``, ``@`` (``@`` joins a job and a hardware kind),
    at most 200 characters, not starting with a dot or a dash. No path separators, so a
    name never leads a study file out of its folder, and no markup, so it prints as it is.
    """
    if not isinstance(name, str) or not name:
        raise StudyError("a study name is needed: " + NAME_CHARS)
    if len(name) > MAX_NAME or not _NAME.fullmatch(name):
        shown = name if len(name) <= 60 else name[:57] + "..."
        raise StudyError(f"study name {shown!r} is not allowed: use {NAME_CHARS}, at most {MAX_NAME} characters, "
                         "not starting with a dot or a dash")
    return name


def default_url(study: str) -> str:
    """``sqlite:///studies/<study>.db``, for a name that is safe."""
    return f"sqlite:///{STUDIES_DIR / (check_name(study) + '.db')}"


def kind(fingerprint: Mapping[str, Any]) -> str:
    """A short name for a hardware kind (device model, count, CPU vector ISA, torch), for per-kind study names."""


    name = str(fingerprint.get("device_name") or fingerprint.get("cpu_model") or "unknown")
    count = fingerprint.get("device_count") or 1
    if fingerprint.get("device_type") == "cuda" and count > 1:
        name = f"{count}x-{name}"
    if fingerprint.get("device_type") != "cuda":
        isa = f"-{fingerprint['cpu_capability']}" if fingerprint.get("cpu_capability") else ""
        name = f"cpu-{name}-{fingerprint.get('cpu_count')}c{isa}"
    torch_version = str(fingerprint.get("torch") or "").split("+")[0]
    slug = re.sub(r"[^a-z0-9.]+", "-", f"{name}-torch{torch_version}".lower()).strip("-")
    return slug[:80]

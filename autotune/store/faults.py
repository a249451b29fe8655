"""How a storage's exceptions are read: the first line of what the driver said, never its traceback."""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    """The first line of an exception (the driver's original error when SQLAlchemy wraps one)."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__

"""Parsing and printing of sizes (``20GiB``) and durations (``2h``): the one place such text is read.

The request (:mod:`autotune.request`) reads its durations and sizes here, whichever surface gave them (the
CLI's parameter types, ``autotune.tune(time_budget="2h")``), and then applies its own rules (positive, whole).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from autotune import clock

from autotune.errors import UnitError

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_TIME_UNITS = {"": 1, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


SIZE_EXPECTED = "expected a size such as 20GiB, 512MB or 1e9"
DURATION_EXPECTED = "expected a duration such as 300, 45s, 10m, 2h or 1h30m"


def parse_size(value: str | int | float) -> int | float:
    """'20GiB', '512MB', '1e9' -> bytes; a number stays a number (a whole float becomes an int).

    It only reads: whether a size may be zero, or a fraction of a byte, is the caller's rule (the request's,
    :mod:`autotune.request`). Raises :class:`UnitError`, which names no option (the caller does)."""
    if isinstance(value, bool):
        raise UnitError(SIZE_EXPECTED)
    if isinstance(value, (int, float)):
        return int(value) if isinstance(value, float) and value.is_integer() else value
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", str(value))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _SIZE_UNITS:
        raise UnitError(SIZE_EXPECTED)
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def parse_duration(value: str | int | float) -> float:
    """'2h', '90m', '45s', '1h30m', '300' -> seconds; a number is seconds.

    It only reads (the sign is the caller's rule); raises :class:`UnitError`, which names no option."""
    if isinstance(value, bool):
        raise UnitError(DURATION_EXPECTED)
    if isinstance(value, (int, float)):
        return float(value)
    parts = re.findall(r"([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)", str(value))
    joined = "".join(f"{n}{u}" for n, u in parts)
    if not parts or joined != re.sub(r"\s+", "", str(value)) or any(u.lower() not in _TIME_UNITS for _, u in parts):
        raise UnitError(DURATION_EXPECTED)
    return sum(float(n) * _TIME_UNITS[u.lower()] for n, u in parts)


def format_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def format_rate(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 1e4:
        return f"{x:,.0f}"
    return f"{x:.1f}"


def format_flops(x: float | None) -> str:
    if not x:
        return "-"
    for unit, size in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if x >= size:
            return f"{x / size:.2f} {unit}"
    return f"{x:.0f} FLOP"


def format_percent(x: float | None, digits: int | None = 1, none: str = "-") -> str:
    """``12.3%``: ``digits`` decimals; ``digits=None``: one below 10%, whole percents from there (``inf%`` for an
    infinite one); ``none`` for no number."""
    if x is None:
        return none
    if digits is None:
        if math.isinf(x):
            return "inf%"
        digits = 1 if 100 * x < 10 else 0
    return f"{100 * x:.{digits}f}%"


def clip(text: str, limit: int, ellipsis: str = "…") -> str:
    """``text`` cut to at most ``limit`` characters, its end replaced by ``ellipsis`` when cut."""
    return text if len(text) <= limit else text[: limit - len(ellipsis)] + ellipsis


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 process``, ``2 processes``: a count and its noun."""
    return f"{n} {word if n == 1 else (many or (word + 'es' if word.endswith(('s', 'x', 'ch', 'sh')) else word + 's'))}"


# ---------------------------------------------------------------- the clock


def now() -> float:
    """Seconds since the epoch: the one clock records are stamped with (``at``, ``started``, an owner's start)."""
    return clock.now()


def iso(at: float | None = None) -> str:
    """A moment as exports and records write it for people and other programs: ``2026-11-27T06:29:29+00:00`` (UTC;
    now by default)."""
    moment = dt.datetime.fromtimestamp(now() if at is None else at, dt.timezone.utc)
    return moment.isoformat(timespec="seconds")


def local_time(at: float | None = None) -> str:
    """A moment on this machine's clock face, for log lines: ``06:29:29`` (now by default)."""
    return dt.datetime.fromtimestamp(now() if at is None else at).strftime("%H:%M:%S")

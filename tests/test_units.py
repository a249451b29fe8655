from __future__ import annotations

import math

import pytest

from autotune.errors import UnitError
from autotune.units import clip, format_bytes, format_duration, format_percent, parse_duration, parse_size


def test_parse_size():
    assert parse_size("20GiB") == 20 * 1024**3
    assert parse_size("512MB") == 512 * 10**6
    assert parse_size("1e9") == 10**9
    assert parse_size(1000) == 1000 and parse_size(2.0) == 2 and isinstance(parse_size(2.0), int)
    assert parse_size(0.5) == 0.5  # read, not judged: a fraction of a byte is the request's to refuse
    for bad in ("lots", "-5", "", True, [1]):
        with pytest.raises(UnitError, match="^expected a size such as"):  # names no option: the caller does
            parse_size(bad)


def test_parse_duration():
    assert parse_duration("2h") == 7200
    assert parse_duration("1h30m") == 5400
    assert parse_duration("45") == 45
    assert parse_duration(90) == 90.0 and isinstance(parse_duration(90), float)
    assert parse_duration("0") == 0  # read, not judged: whether a duration may be zero is the caller's rule
    for bad in ("soon", "5 parsecs", "-5", "", "2h soon", False):
        with pytest.raises(UnitError, match="^expected a duration such as"):
            parse_duration(bad)


def test_formatting():
    assert format_bytes(3 * 1024**3) == "3.0 GiB"
    assert format_duration(3700) == "1h01m"


def test_clip():
    assert clip("abcdef", 6) == "abcdef"
    assert clip("abcdefg", 6) == "abcde…"  # the dashboard's
    assert clip("abcdefg", 6, "...") == "abc..."  # a trial line's (autotune.tuning.progress)


def test_format_percent():
    assert format_percent(None) == "-" and format_percent(0.1234) == "12.3%"  # the dashboard's
    assert format_percent(None, digits=None, none="?") == "?"  # the numerics check's: one decimal below 10%
    assert format_percent(0.0123, digits=None) == "1.2%" and format_percent(0.1234, digits=None) == "12%"
    assert format_percent(math.inf, digits=None) == "inf%" and format_percent(-math.inf, digits=None) == "inf%"

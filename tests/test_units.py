from __future__ import annotations

import pytest

from autotune.errors import AutotuneError
from autotune.units import format_bytes, format_duration, parse_duration, parse_size


def test_parse_size():
    assert parse_size("20GiB") == 20 * 1024**3
    assert parse_size("512MB") == 512 * 10**6
    assert parse_size("1e9") == 10**9
    with pytest.raises(AutotuneError, match="expected a size"):
        parse_size("lots")


def test_parse_duration():
    assert parse_duration("2h") == 7200
    assert parse_duration("1h30m") == 5400
    assert parse_duration("45") == 45
    for bad in ("soon", "5 parsecs", "0"):
        with pytest.raises(AutotuneError):
            parse_duration(bad)


def test_formatting():
    assert format_bytes(3 * 1024**3) == "3.0 GiB"
    assert format_duration(3700) == "1h01m"

"""What the test suite's tests share beyond their fixtures: a test that cannot run here, a wait on a condition, and
the variables through which CI hands the suite its PostgreSQL server. ``tests/conftest.py`` holds the fixtures and
imports these; a test imports them from here (a conftest is pytest's, never a module to import).
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, NoReturn

CI_VAR = "CI"
POSTGRES_URL_VAR = "AUTOTUNE_TEST_POSTGRES_URL"  # .ci/postgres.sh exports the server's URL ...
POSTGRES_CTL_VAR = "AUTOTUNE_TEST_POSTGRES_CTL"  # ... and how to stop and start it (pg_ctl and its data folder)
START_ONE = "start one with: source .ci/postgres.sh"


def in_ci() -> bool:
    """True where the environment says this is CI (``CI=true``, as CI services and .ci/run set it)."""
    return os.environ.get(CI_VAR, "").strip().lower() in ("true", "1", "yes")


def need(reason: str) -> NoReturn:
    """This test cannot run here, for ``reason`` (what is missing, and how to get it).

    Outside CI the test skips with the reason. In CI it fails with it: CI installs PostgreSQL,
    Chromium and the test extra and runs as root, so a missing part there is a broken CI, not a
    machine without it, and a run that skipped those tests must not pass."""
    import pytest

    if in_ci():
        pytest.fail(f"{reason} [{CI_VAR}={os.environ.get(CI_VAR)}: a test that cannot run fails in CI instead of "
                    "skipping]", pytrace=False)
    pytest.skip(reason)


def wait_until(predicate: Callable[[], Any], timeout: float, what: str | Callable[[], str],
               interval: float = 0.05) -> Any:
    """Poll ``predicate()`` until it returns something truthy, and return that; fail the test,
    naming ``what`` it waited for (a string, or a callable giving one: the state at the deadline),
    when ``timeout`` seconds pass first. Tests wait on conditions with this instead of sleeping
    for a guessed while; the pause between polls is the only sleep."""
    import pytest

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"waited {timeout:g} s for {what() if callable(what) else what}, in vain", pytrace=False)
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))

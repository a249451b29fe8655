"""Writing a file whole or not at all: the one atomic write every part uses (a trial's result and progress, an export,
the dashboard's page).

A reader (the runner reading a trial's result, a user's script reading an export, a browser reloading the page) must
never see half a file: the text goes to a temporary file beside the target, which is renamed over it (``os.replace``,
atomic on one file system); on any failure the temporary file is removed and the target is as it was.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str | Path, text: str, mode: int = 0o644) -> Path:
    """Write ``text`` to ``path`` whole or not at all; raises OSError (the caller says what failed, in its words)."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target

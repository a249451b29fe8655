"""The journal backend: Optuna's journal file storage (``journal:PATH``), with appends that survive a cut write.

The journal file needs no server and no SQLite lock; it has no heartbeats, so a stopped
process's trials are judged stale by pid (this host) or age (other hosts), see
:mod:`autotune.store.recovery`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import optuna
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock, JournalStorage


def path_of(url: str) -> Path:
    """The file of a ``journal:`` URL: ``journal:///abs/file.log`` or ``journal:rel/file.log``."""
    raw = url[len("journal:") :]
    return Path(raw[2:] if raw.startswith("//") else raw)


def connect(path: Path) -> optuna.storages.BaseStorage:
    """Optuna's journal storage on ``path`` (created on first use; OSError when it cannot be)."""
    return JournalStorage(JournalFile(str(path)))


class JournalFile(JournalFileBackend):
    """Optuna's journal file, whose appends first drop a record that a failed write left half-written.

    A write cut short (a full disk, a process killed inside ``write``) leaves the file ending inside
    a record. Optuna's reader skips such a tail, but the next append would join it and the new
    record into one line no reader can decode, in the middle of the file: every later read fails,
    and the study is lost until the file is mended by hand. So each append, under the file lock
    Optuna's writers take by default, first cuts the file back to its last whole line; what it cuts
    was never a record any reader counted. Writes as Optuna's own ``append_logs`` does otherwise.
    """

    def __init__(self, file_path: str) -> None:
        self.path = file_path
        self.lock = JournalFileSymlinkLock(file_path)  # Optuna's default lock for this backend
        super().__init__(file_path, lock_obj=self.lock)

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        text = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs).encode("utf-8")
        self.lock.acquire()
        try:
            with open(self.path, "r+b") as fh:
                _cut_half_written_tail(fh)
                fh.seek(0, os.SEEK_END)
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
        finally:
            self.lock.release()


def _cut_half_written_tail(fh: Any, chunk: int = 1 << 16) -> int:
    """Truncate an open file after its last newline; returns the bytes cut (0 when it ends in one)."""
    size = fh.seek(0, os.SEEK_END)
    end = size
    while end > 0:
        start = max(0, end - chunk)
        fh.seek(start)
        block = fh.read(end - start)
        if end == size and block.endswith(b"\n"):
            return 0
        i = block.rfind(b"\n")
        if i >= 0:
            fh.truncate(start + i + 1)
            return size - (start + i + 1)
        end = start
    fh.truncate(0)
    return size

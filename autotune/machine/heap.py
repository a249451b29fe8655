"""The host heap: glibc malloc's options, set in a running process with ``mallopt(3)``.

Why: PyTorch's CPU tensors come from the C library's ``malloc``. glibc serves a large
request with a fresh ``mmap`` (above a threshold that starts at 128 KiB and rises as such
blocks are freed) and hands the top of its heap back to the system past a trim threshold;
the next step then touches fresh pages again, one minor page fault per 4 KiB page. A
training step allocates and frees the same megabytes every step, so it pays that every
step, and how much it pays depends on the process's history: a configuration measured after
another one in the same process found the heap already grown and ran faster (the reason
``benchmarks/paths_agree.py`` read the mlp's winner 6.58x in a shared process against 3.96x
in processes of its own). ``retain`` (no mmap, no trim) keeps freed memory in the heap for
the next step whatever came before; the knob ``host_allocator`` searches it
(:mod:`autotune.knobs.registry`; ``benchmarks/host_heap.py`` measures what it buys). What it
costs is memory, and the peak-memory objective shows it: torch's 64-byte-aligned blocks leave
small pieces between them that glibc's thread cache holds, so the heap grows for a few steps
before it is reused (tests/test_heap.py: a step of one 64 MiB block grows it for a few steps,
then faults no page).

``mallopt`` acts at once in this process and is inherited by forked children (DataLoader
workers); the ``MALLOC_*_`` environment variables the knob also sets reach processes started
afterwards (glibc reads them at start). Elsewhere than glibc the knob does not apply.
"""

from __future__ import annotations

import ctypes
import functools
import platform
from typing import Mapping

# mallopt(3) parameter numbers, from glibc's <malloc.h>.
PARAMETERS = {"M_TRIM_THRESHOLD": -1, "M_TOP_PAD": -2, "M_MMAP_THRESHOLD": -3, "M_MMAP_MAX": -4}
# The largest value mallopt takes (an int): keep up to 2 GiB free at the top of the heap.
NEVER_TRIM = 2**31 - 1


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.mallopt.restype = ctypes.c_int
        return libc
    except (OSError, AttributeError):  # pragma: no cover - a libc without mallopt
        return None


def available() -> bool:
    """Whether this process's C library is glibc with ``mallopt``."""
    return _libc() is not None


def set_options(options: Mapping[str, int]) -> bool:
    """``mallopt(name, value)`` for each option (names as in :data:`PARAMETERS`); False where glibc is not here
    or refused one of them."""
    libc = _libc()
    if libc is None:
        return False
    return all(libc.mallopt(PARAMETERS[name], int(value)) == 1 for name, value in options.items())

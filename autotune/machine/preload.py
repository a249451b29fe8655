"""Where an allocator library that a trial can preload (``LD_PRELOAD``) lives on this machine, and whether a
process has it loaded.

Why: the knob ``host_allocator`` can run a trial on jemalloc or tcmalloc instead of the C
library's malloc. Neither comes with PyTorch or any wheel: the system's packages install them
(Debian's ``libjemalloc2``, ``libtcmalloc-minimal4``), and so do conda and some virtual
environments, each in a folder of its own, with names such as ``libjemalloc.so.2`` that
PyTorch's own CPU launcher (``torch.backends.xeon.run_cpu``, which globs ``libjemalloc.so``)
misses. :func:`find` looks where each installs it: the running environment's ``lib`` folder
(``sys.prefix``: a virtual environment's), conda's (``$CONDA_PREFIX/lib``), then the dynamic
linker's cache (``ldconfig -p``: Debian's). Where none has it, the value does not apply and
:func:`missing` says which package to install. A preload takes effect only in a process started
with it, and a trial proves it took: :func:`loaded` reads the process's own ``/proc/self/maps``.
Nothing here imports torch.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping


@dataclass(frozen=True)
class Library:
    """A preloadable library: the file names it is installed under (the linked name first), and who installs it."""

    files: tuple[str, ...]
    packages: str


LIBRARIES: dict[str, Library] = {
    "jemalloc": Library(("libjemalloc.so.2", "libjemalloc.so"),
                        "Debian/Ubuntu: apt-get install libjemalloc2; conda: conda install -c conda-forge jemalloc"),
    "tcmalloc": Library(("libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc_minimal.so", "libtcmalloc.so"),
                        "Debian/Ubuntu: apt-get install libtcmalloc-minimal4; "
                        "conda: conda install -c conda-forge gperftools"),
}


@functools.lru_cache(maxsize=1)
def _linker_cache() -> str:
    """``ldconfig -p``: the libraries the dynamic linker knows (empty where there is no ldconfig)."""
    tool = shutil.which("ldconfig") or next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(p)),
                                            None)
    if tool is None:
        return ""
    try:
        return subprocess.run([tool, "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def find(name: str, environ: Mapping[str, str] | None = None, prefix: str | None = None,
         linker_cache: str | None = None) -> str | None:
    """The path of library ``name`` (a key of :data:`LIBRARIES`: ``jemalloc``, ``tcmalloc``), or None where it is
    not installed: in ``prefix``/lib (default ``sys.prefix``, a virtual environment's), ``$CONDA_PREFIX``/lib, then
    the dynamic linker's cache (default: ``ldconfig -p``, where Debian's packages are)."""
    library = LIBRARIES[name]
    environ = os.environ if environ is None else environ
    folders = [Path(prefix if prefix is not None else sys.prefix) / "lib"]
    if environ.get("CONDA_PREFIX"):
        folders.append(Path(environ["CONDA_PREFIX"]) / "lib")
    for folder in folders:
        for file in library.files:
            if (folder / file).is_file():
                return str(folder / file)
    cache = _linker_cache() if linker_cache is None else linker_cache
    for file in library.files:
        for line in cache.splitlines():  # "\tlibjemalloc.so.2 (libc6,x86-64) => /lib/x86_64-linux-gnu/libjemalloc.so.2"
            entry, _, path = line.strip().partition(" => ")
            if entry.split(" ", 1)[0] == file and path and os.path.isfile(path):
                return path
    return None


def found() -> tuple[str, ...]:
    """The names of the libraries of :data:`LIBRARIES` installed here."""
    return tuple(name for name in LIBRARIES if find(name) is not None)


def missing(name: str) -> str:
    """Why library ``name`` cannot be preloaded here, naming the package that installs it."""
    library = LIBRARIES[name]
    return (f"{library.files[0]} is not installed (looked in sys.prefix/lib, $CONDA_PREFIX/lib and ldconfig -p); "
            f"{library.packages}")


def loaded(name: str, maps: str | None = None) -> str | None:
    """The path of library ``name`` as this process has it mapped (``/proc/self/maps``, or ``maps``' text), or None
    where it is not loaded: the proof that a preload took."""
    if maps is None:
        try:
            maps = Path("/proc/self/maps").read_text()
        except OSError:
            return None
    stems = tuple(file.split(".so")[0] + ".so" for file in LIBRARIES[name].files)
    for line in maps.splitlines():
        path = line.split(None, 5)[5].strip() if len(line.split(None, 5)) == 6 else ""
        if os.path.basename(path).startswith(stems):
            return path
    return None


def how(name: str) -> str:
    """What a user writes to preload library ``name`` into a training script's process."""
    path = find(name) or f"<the path of {LIBRARIES[name].files[0]}>"
    return f"LD_PRELOAD={path} in the environment before Python starts (LD_PRELOAD={path} python train.py)"

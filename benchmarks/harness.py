"""What every benchmark shares: its arguments, its printing, opening stores, and writing its results.

Why one module: a figure is worth what its record says about where it came from. The scripts each
had their own argument set-up, their own ``say()`` and their own results writer, and a new run
overwrote the file that README.md cited for an older one. Here:

- :func:`arguments`: the script's parser, its docstring as the help, and the flags every script
  takes (``--out``, ``--label``, ``--no-write``, ``--results-dir``; ``--trials`` and
  ``--repeat`` where asked for);
- :func:`say`: print a line and keep it for the results file;
- :func:`write`: the results, kept by date: ``benchmarks/results/<name>-<YYYY-MM-DD>.txt`` (what the
  script said, under a header) and ``.json`` (``{"header": ..., "results": ...}``); a second run the
  same day gets ``-2``, then ``-3``: an earlier file is never overwritten. The header names the date,
  the host, the CPU with the flags that decide its speed (AVX2, AVX-512, its bf16, AMX: the same
  bf16 step differs 8x between CPUs with and without them), the cores, the memory, Python, torch,
  optuna, the checkout, the settings in the environment and the exact command line;
- :func:`open_store`: a study storage through the product's own API (``autotune.store.Store``), so a
  benchmark reads and writes studies as ``autotune`` does.

Scripts run from the repository root with the package installed (``pip install -e .``):
``python benchmarks/NAME.py``; the script's own folder is on ``sys.path``, so ``import harness`` works
and nothing edits ``sys.path``. Nothing here imports from ``tests/`` or patches the product.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import os
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.store import Store

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
#: The CPU flags that decide how fast a step runs (/proc/cpuinfo's names), by architecture.
SPEED_FLAGS = {
    "x86_64": ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
               "amx_int8"),
    "aarch64": ("asimd", "sve", "sve2", "bf16", "i8mm"),
}
#: Settings in the environment that change what a benchmark measures (their values go in the header).
ENVIRONMENT = re.compile(r"AUTOTUNE_\w+|OMP_NUM_THREADS|MKL_NUM_THREADS|CUDA_VISIBLE_DEVICES")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
STARTED = dt.datetime.now().astimezone()

_said: list[str] = []
_claimed: dict[tuple[Path, str], Path] = {}  # (folder, name) -> this run's dated stem, reused by every write
_header: dict[str, Any] | None = None


# ---------------------------------------------------------------- arguments


def script_name() -> str:
    """The running script's name (``busy_machine`` for ``python benchmarks/busy_machine.py``)."""
    return Path(sys.argv[0]).stem or "benchmark"


def _name(text: str) -> str:
    if not _NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a results name (letters, digits and . _ -; no folder)")
    return text


def arguments(doc: str | None, *, trials: int | None = None, repeat: int | None = None) -> argparse.ArgumentParser:
    """The script's parser: ``doc`` (its docstring) as the help, and the flags every benchmark shares.

    ``--out NAME``: the results' name (default: the script's); ``--label TEXT``: a note for the header
    (before/after a change); ``--no-write``: print only; ``--results-dir DIR``: where results go
    (default benchmarks/results). With ``trials`` / ``repeat`` also ``--trials N`` and ``--repeat N``
    (``--repeats`` is the same flag) with that default.
    """
    parser = argparse.ArgumentParser(prog=f"python benchmarks/{script_name()}.py",
                                     description=(doc or "").strip() or None,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    shared = parser.add_argument_group("results (every benchmark)")
    shared.add_argument("--out", type=_name, default=None,
                        help="results name: RESULTS_DIR/OUT-<date>.txt and .json (default: the script's name)")
    shared.add_argument("--label", default="", help="a note for the results header, e.g. before or after a change")
    shared.add_argument("--no-write", action="store_true", help="print only; write no results file")
    shared.add_argument("--results-dir", type=Path, default=RESULTS,
                        help="where results go (default: benchmarks/results)")
    if trials is not None:
        parser.add_argument("--trials", type=int, default=trials, help=f"trials per study (default {trials})")
    if repeat is not None:
        parser.add_argument("--repeat", "--repeats", dest="repeat", type=int, default=repeat,
                            help=f"how many times each measurement is repeated (default {repeat})")
    return parser


# ---------------------------------------------------------------- printing


def say(line: str = "", *, keep: bool = True) -> None:
    """Print ``line`` now; with ``keep`` it also goes into the results file (progress lines do not)."""
    print(line, flush=True)
    if keep:
        _said.append(line)


def start_on_this_machine() -> None:
    """The opening of a benchmark of trials on this CPU: the warm server started, then a line naming the machine, its
    C library and how busy other processes kept it at the start (a figure from a busy machine says so)."""
    import platform
    import time

    from autotune.machine import hardware, identity, load
    from autotune.trial.runner import warm_up

    warm_up()
    busy = load.other_cores_now(2.0)
    say(f"machine: {identity.short(hardware.fingerprint('cpu'))}, {load.cpu_count()} cores, "
        f"Python {platform.python_version()}, {platform.libc_ver()[0]} {platform.libc_ver()[1]}; "
        f"{time.strftime('%Y-%m-%d %H:%M')}; other processes used {busy['other_cores']:.1f} cores at the start")


def said() -> list[str]:
    """The lines kept so far."""
    return list(_said)


# ---------------------------------------------------------------- the machine


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (empty where there is none)."""
    out: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        if not line.strip():
            if out:
                break
            continue
        key, _, value = line.partition(":")
        out.setdefault(key.strip(), value.strip())
    return out


def _meminfo(key: str) -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(f"{key}:"))
    except (OSError, StopIteration, ValueError):
        return None


def memory_bytes(available: bool = False) -> int | None:
    """The machine's memory (``available``: what is free for new processes now), from /proc/meminfo."""
    return _meminfo("MemAvailable" if available else "MemTotal")


def cpu_model() -> str:
    info = _cpuinfo()
    return info.get("model name") or info.get("Hardware") or platform.processor() or platform.machine()


def cpu_flags() -> tuple[list[str], list[str]]:
    """The speed-deciding flags of :data:`SPEED_FLAGS` this CPU has, and those it lacks."""
    info = _cpuinfo()
    have = set((info.get("flags") or info.get("Features") or "").split())
    wanted = SPEED_FLAGS.get(platform.machine(), ())
    return [f for f in wanted if f in have], [f for f in wanted if f not in have]


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _torch() -> dict[str, Any]:
    """torch's version, the CPU code it dispatches to, and the GPU when there is one."""
    try:
        import torch
    except ImportError:
        return {"torch": "not installed"}
    out: dict[str, Any] = {"torch": torch.__version__}
    capability = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)  # torch 2.1 on
    if capability is not None:
        out["torch_cpu_capability"] = capability()
    if torch.cuda.is_available():
        from autotune.machine.hardware import driver_version

        props = torch.cuda.get_device_properties(0)
        out["gpu"] = (f"{props.name}, {props.total_memory / 2**30:.0f} GiB, {torch.cuda.device_count()} device(s), "
                      f"driver {driver_version() or 'unknown'}, CUDA {torch.version.cuda}")
    return out


def _git() -> str:
    """The checkout's commit, and whether autotune/ differs from it."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "autotune"], capture_output=True,
                               text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "not a git checkout"
    return head + (" (autotune/ has uncommitted changes)" if dirty else "")


def _redact(value: str) -> str:
    """A URL's password masked (``postgresql://user:***@host/db``)."""
    return re.sub(r"(://[^:/@\s]*:)[^@\s]*@", r"\1***@", value)


def command() -> str:
    """The command line as run: the interpreter and every argument."""
    return shlex.join([sys.executable, *sys.argv])


def header() -> dict[str, Any]:
    """What the results header records (computed once per run; it imports torch)."""
    global _header
    if _header is None:
        have, lack = cpu_flags()
        cores = os.cpu_count()
        usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
        memory = memory_bytes()
        _header = {
            "benchmark": script_name(),
            "command": command(),
            "cwd": os.getcwd(),
            "started": STARTED.isoformat(timespec="seconds"),
            "host": platform.node(),
            "cpu": cpu_model(),
            "cpu_flags": have,
            "cpu_flags_absent": lack,
            "cores": cores,
            "cores_usable": usable,
            "memory_gib": round(memory / 2**30, 1) if memory else None,
            "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(),
            "optuna": _version("optuna"),
            "autotune": _version("autotune"),
            "checkout": _git(),
            "environment": {k: _redact(v) for k, v in sorted(os.environ.items()) if ENVIRONMENT.fullmatch(k)},
            **_torch(),
        }
    return dict(_header)


def header_lines(head: dict[str, Any], label: str = "") -> list[str]:
    """The header as the .txt file's first lines (each starts with ``# ``)."""
    cores = f"{head['cores']} cores" + (f" ({head['cores_usable']} usable)"
                                        if head["cores_usable"] != head["cores"] else "")
    flags = " ".join(head["cpu_flags"]) or "none of " + " ".join(head["cpu_flags_absent"])
    absent = (f" (absent: {' '.join(head['cpu_flags_absent'])})" if head["cpu_flags"] and head["cpu_flags_absent"]
              else "")
    capability = f"; torch dispatches {head['torch_cpu_capability']}" if head.get("torch_cpu_capability") else ""
    memory = f"{head['memory_gib']} GiB" if head["memory_gib"] else "unknown"
    lines = [
        f"benchmark: {head['benchmark']}",
        f"command: {head['command']}  (in {head['cwd']})",
        f"date: {head['started']} (started); written {head['written']}",
        f"host: {head['host']}, {head['os']}",
        f"cpu: {head['cpu']}, {cores}, memory {memory}",
        f"cpu flags: {flags}{absent}{capability}",
        f"gpu: {head.get('gpu') or 'none'}",
        (f"software: Python {head['python']}, torch {head['torch']}, optuna {head['optuna']}, "
         f"autotune {head['autotune']} at {head['checkout']}"),
        "environment: " + (" ".join(f"{k}={v}" for k, v in head["environment"].items())
                           or "no AUTOTUNE_* or thread settings"),
    ]
    if label:
        lines.append(f"label: {label}")
    return [f"# {line}" for line in lines]


# ---------------------------------------------------------------- results


def dated(folder: Path, name: str) -> Path:
    """This run's results stem in ``folder``: ``name-<date>``, or ``-2``, ``-3`` ... when that day has one already.

    Claimed once per run (its ``.txt`` is created empty), so that every later :func:`write` of the run
    rewrites its own file and no other run's."""
    key = (folder.resolve(), name)
    if key in _claimed:
        return _claimed[key]
    folder.mkdir(parents=True, exist_ok=True)
    day = STARTED.strftime("%Y-%m-%d")
    n = 1
    while True:
        stem = folder / (f"{name}-{day}" if n == 1 else f"{name}-{day}-{n}")
        taken = any(p.name.startswith(stem.name + ".") for p in folder.iterdir())
        if not taken:
            try:
                stem.with_name(stem.name + ".txt").open("x").close()
            except FileExistsError:
                taken = True
        if not taken:
            _claimed[key] = stem
            return stem
        n += 1


def write(args: argparse.Namespace, data: Any = None, *, name: str | None = None, text: list[str] | None = None,
          files: dict[str, str] | None = None) -> Path | None:
    """Write this run's results, kept by date (see :func:`dated`); returns the ``.txt`` path (None with --no-write).

    The ``.txt`` holds the header and then ``text`` (default: every line :func:`say` kept); the ``.json``
    ``{"header": ..., "results": data}`` (when ``data`` is not None); ``files`` more files of the same stem by
    suffix (``{".md": table}``). The name is ``--out``, else ``name``, else the script's. Called again in the
    same run (after each part of a long one), it rewrites the same files."""
    if getattr(args, "no_write", False):
        return None
    name = getattr(args, "out", None) or name or script_name()
    stem = dated(Path(getattr(args, "results_dir", None) or RESULTS), name)
    head = {**header(), "written": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "label": getattr(args, "label", "") or ""}
    lines = header_lines(head, head["label"]) + [""] + list(_said if text is None else text)
    txt = stem.with_name(stem.name + ".txt")
    txt.write_text("\n".join(lines) + "\n")
    written = [txt]
    if data is not None:
        path = stem.with_name(stem.name + ".json")
        path.write_text(json.dumps({"header": head, "results": data}, indent=1, default=str) + "\n")
        written.append(path)
    for suffix, body in (files or {}).items():
        path = stem.with_name(stem.name + suffix)
        path.write_text(body)
        written.append(path)
    print("results: " + ", ".join(_shown(p) for p in written), file=sys.stderr, flush=True)
    return txt


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


# ---------------------------------------------------------------- stores


def sqlite_url(path: str | Path) -> str:
    """The storage URL of a SQLite file (its absolute path)."""
    return f"sqlite:///{Path(path).resolve()}"


def open_store(url: str, *, read_only: bool = False, fresh: bool = False) -> Store:
    """The product's store for ``url`` (``autotune.store.Store.open``: one per URL and process); ``fresh``: a new
    one, connected anew (for timing a read as a new process would do it)."""
    from autotune.store import Store

    return Store(url, read_only=read_only) if fresh else Store.open(url, read_only=read_only)


def fresh_postgres(url: str, database: str) -> str:
    """``url`` pointing at ``database``, dropped (with its connections) and created empty on that server."""
    import psycopg2
    from sqlalchemy.engine import make_url

    conn = psycopg2.connect(url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{database}"')
    conn.close()
    return make_url(url).set(database=database).render_as_string(hide_password=False)

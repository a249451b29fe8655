"""Ship a Python callable (a model or data factory) to the trial processes by value.

Trials run in processes forked from a fork server (:mod:`autotune.trial.forkserver`), a
separate interpreter that cannot import the caller's ``__main__`` (a notebook, a
script) or a function defined inside another function. :func:`ship` therefore
pickles such a callable with cloudpickle, and the spec carries it:

- ``WorkloadSpec.model`` (or ``.data``) becomes ``pickled:<name>@<sha256>``, where
  the digest is of the callable's *code*, not of the pickled bytes (see below);
- ``WorkloadSpec.pickled`` maps that string to the base64 of the pickled bytes. The
  bytes travel with the spec wherever it goes: in every trial request, and in the
  job stored on the study, so a new Python process (``autotune.tune`` again, or
  ``autotune worker --study NAME`` on another machine sharing the storage) can
  rebuild the workload. They are left out of the study's ``workload`` attribute,
  which names the workload (identity, status, exports), never its bytes.

Why the digest is of the code: cloudpickle's bytes differ from one process to the
next for the same source (a class defined in ``__main__`` gets a random tracker id;
a notebook cell's file name holds the kernel's pid), so a digest of the bytes would
make every re-run of a script or notebook a "different workload" that the study
refuses to resume. :func:`digest` hashes what decides what runs: the bytecode,
constants and names of the callable and of every function and class it reaches by
value (defaults, closures, globals), simple captured values (numbers, strings), the
shapes and dtypes of captured tensors, and the module and name of everything
imported by reference. Line numbers, file names and comments do not count, so
re-running the same code resumes its study, and changing a constant or a layer does
not. Like ``--model pkg:attr`` on the command line, what an importable module does
is named, not hashed.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import pickle
import re
import sys
import types
from typing import Any, Mapping

from autotune.errors import SpecError
from autotune.request import option

PREFIX = "pickled:"
MAX_BYTES = 8 * 1024**2  # carried in every trial request and stored with the study
_NODES = 20000  # at most this many objects are walked for a digest
_SIMPLE = (type(None), bool, int, float, complex, str, bytes)
# A class's attributes that say where it was defined or what pickling cached on it, not what it does.
_CLASS_SKIP = ("__dict__", "__weakref__", "__module__", "__qualname__", "__firstlineno__", "__static_attributes__",
               "__slotnames__")


def is_pickled(spec: Any) -> bool:
    return isinstance(spec, str) and spec.startswith(PREFIX)


def label(obj: Any) -> str:
    """A readable name for a callable: ``factory``, ``test_tune.factory``, ``lambda``, ``MyNet``."""
    target = obj if isinstance(obj, (types.FunctionType, type, functools.partial)) else type(obj)
    if isinstance(obj, functools.partial):
        target = obj.func
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or type(obj).__name__
    name = name.replace(".<locals>", "")
    return re.sub(r"[^A-Za-z0-9_.\-]+", "", name).strip(".-") or "callable"


def reference(obj: Any) -> str | None:
    """``module:qualname`` when ``obj`` can be imported by name in another process (never from ``__main__``)."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or module == "__main__" or "<" in qualname:
        return None
    mod = sys.modules.get(module) or _imported(module)
    if mod is None or getattr(mod, "__file__", None) is None and module not in sys.builtin_module_names:
        return None  # a module object made at run time: another process cannot import it
    found: Any = mod
    for part in qualname.split("."):
        found = getattr(found, part, None)
        if found is None:
            return None
    return f"{module}:{qualname}" if found is obj else None


def _imported(module: str) -> Any:
    """The module an object names as its own and this process has not imported yet (a public face such as
    ``autotune.examples``, where the object is defined further in), imported; None when it does not import."""
    import importlib

    try:
        return importlib.import_module(module)
    except Exception:  # noqa: BLE001 - a name that does not import is no reference another process can use
        return None


# ---------------------------------------------------------------- digest


class _Digest:
    """A sha256 of what a callable runs, stable across processes (see the module docstring)."""

    def __init__(self) -> None:
        self.hash = hashlib.sha256()
        self.seen: dict[int, int] = {}
        self.keep: list[Any] = []  # ids stay valid while we walk

    def put(self, *parts: Any) -> None:
        for p in parts:
            self.hash.update(p if isinstance(p, bytes) else str(p).encode())
            self.hash.update(b"\x00")

    def add(self, obj: Any) -> None:
        if isinstance(obj, (str, bytes)):
            self.put("v", type(obj).__name__, len(obj), obj)
            return
        if isinstance(obj, _SIMPLE):
            self.put("v", type(obj).__name__, repr(obj))
            return
        if id(obj) in self.seen:
            self.put("seen", self.seen[id(obj)])
            return
        if len(self.seen) >= _NODES:
            self.put("more", type(obj).__qualname__)
            return
        self.seen[id(obj)] = len(self.seen)
        self.keep.append(obj)
        if isinstance(obj, types.ModuleType):
            self.put("module", obj.__name__)
            return
        ref = reference(obj) if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)) else None
        if ref is not None:
            self.put("ref", ref)
            return
        if isinstance(obj, (list, tuple)):
            self.put(type(obj).__name__, len(obj))
            for item in obj[:1000]:
                self.add(item)
        elif isinstance(obj, (set, frozenset)):
            self.put(type(obj).__name__, len(obj))
            for item in sorted(obj, key=_order)[:1000]:
                self.add(item)
        elif isinstance(obj, dict):
            self.put("dict", len(obj))
            for key in sorted(obj, key=_order)[:1000]:
                self.add(key)
                self.add(obj[key])
        elif isinstance(obj, types.FunctionType):
            self.put("function", obj.__qualname__)
            self.code(obj.__code__, obj.__globals__)
            self.add(obj.__defaults__)
            self.add(obj.__kwdefaults__)
            for cell in obj.__closure__ or ():
                try:
                    self.add(cell.cell_contents)
                except ValueError:  # an empty cell
                    self.put("empty")
        elif isinstance(obj, types.MethodType):
            self.put("method")
            self.add(obj.__func__)
            self.add(obj.__self__)
        elif isinstance(obj, (staticmethod, classmethod)):
            self.put(type(obj).__name__)
            self.add(obj.__func__)
        elif isinstance(obj, property):
            self.put("property")
            for f in (obj.fget, obj.fset, obj.fdel):
                self.add(f)
        elif isinstance(obj, functools.partial):
            self.put("partial")
            self.add(obj.func)
            self.add(obj.args)
            self.add(obj.keywords)
        elif isinstance(obj, type):
            self.put("class", obj.__qualname__)
            for base in obj.__bases__:
                self.add(base)
            for key in sorted(obj.__dict__):
                if key not in _CLASS_SKIP:
                    self.put(key)
                    self.add(obj.__dict__[key])
        elif _is_tensor(obj):
            self.put("tensor", type(obj).__qualname__, tuple(obj.shape), obj.dtype)
        elif isinstance(obj, types.CodeType):
            self.code(obj, {})
        else:  # an instance: its class, and its attributes (an nn.Module's submodules and parameter shapes)
            self.put("object")
            self.add(type(obj))
            state = getattr(obj, "__dict__", None)
            if isinstance(state, dict):
                self.add(state)

    def code(self, code: types.CodeType, globals_: Mapping[str, Any]) -> None:
        self.put("code", code.co_code, code.co_names, code.co_varnames, code.co_freevars, code.co_argcount,
                 code.co_kwonlyargcount, code.co_flags)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                self.code(const, globals_)
            else:
                self.add(const)
        for name in code.co_names:
            if name in globals_:
                self.put("global", name)
                self.add(globals_[name])


def _order(obj: Any) -> tuple[str, str]:
    return (type(obj).__qualname__, repr(obj) if isinstance(obj, _SIMPLE) else "")


def _is_tensor(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def digest(obj: Any) -> str:
    """The sha256 (hex) of what ``obj`` runs; the same for the same code in any process."""
    d = _Digest()
    d.put("autotune.shipping/1")
    d.add(obj)
    return d.hash.hexdigest()


# ---------------------------------------------------------------- ship and load


def ship(obj: Any, what: str = "model") -> tuple[str, str]:
    """Pickle ``obj`` by value: returns (``pickled:<name>@<sha256>``, base64 of the bytes); SpecError when it cannot."""
    name = label(obj)
    try:
        import cloudpickle
    except ImportError:
        raise SpecError(f"{what} {name!r}: passing a Python object needs cloudpickle (pip install cloudpickle), "
                        "or name it as module:attr") from None
    try:
        data = cloudpickle.dumps(obj, protocol=pickle.DEFAULT_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - TypeError, PicklingError, anything a __reduce__ raises
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise SpecError(
            f"{what} {name!r} cannot be sent to the trial processes: pickling it failed "
            f"({type(exc).__name__}: {reason}); "
            "create that object inside the factory instead of capturing it, or pass a module:attr spec"
        ) from None
    if len(data) > MAX_BYTES:
        raise SpecError(
            f"{what} {name!r} pickles to {len(data) / 1024**2:.0f} MiB (at most {MAX_BYTES // 1024**2} MiB travel "
            "with each trial): it captures large objects (weights? a dataset?); build them inside the factory"
        )
    try:
        key = digest(obj)
    except Exception:  # noqa: BLE001 - a graph too deep to walk, an attribute that raises: the bytes name it then
        # (the same object in another process may then be a "different workload" to resume)
        key = hashlib.sha256(data).hexdigest()
    return f"{PREFIX}{name}@{key}", base64.b64encode(data).decode("ascii")


def load(spec: str, pickled: Mapping[str, str], field: str = "model") -> Any:
    """The object a ``pickled:`` spec names, unpickled from the bytes the spec carries (``field``: ``model`` or
    ``data``, which a message names)."""
    given = option(field, spec, quoted=True)
    raw = pickled.get(spec)
    if raw is None:
        raise SpecError(
            f"{given} is a Python object sent by value by autotune.tune()/measure(), and its bytes are not "
            "here: resume it from Python (autotune.tune(..., study=NAME)) or with `autotune worker --study NAME`"
        )
    try:
        return pickle.loads(base64.b64decode(raw))
    except Exception as exc:  # noqa: BLE001 - a module missing here, a class changed, ...
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise SpecError(f"{given} could not be unpickled in the trial process: {type(exc).__name__}: "
                        f"{reason}") from None


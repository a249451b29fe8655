"""Does a trial forked from the warm server measure a configuration as a freshly started interpreter does?

Every trial of a study is forked from one warm interpreter (:mod:`autotune.trial.forkserver`) that imported torch
once. A user's training starts a fresh interpreter. Whatever the fork carries over (the server's glibc heap and its
malloc thresholds, its imported modules and their caches, the process's session, the order of a round) would bias a
claim the user's loop then misses. This script measures the same configurations both ways, paired, with the same
trial code: the request a study sends (:class:`autotune.trial.messages.TrialRequest`, lean settings) is answered

- **forked**: by :meth:`autotune.trial.runner.Runner.measure`, a child of the warm server, as every trial is;
- **fresh**: by :func:`autotune.trial.child.main` in a newly started ``python`` (the server's environment, a session
  of its own as the server's children have, the server's imports and nothing else run before the trial),

alternately (forked first in even rounds, fresh first in odd ones), each configuration of a model one after the
other within a round; or, with ``--together``, both at the same moment (the fresh interpreter imports first, then
both trials begin), so that each sees the same other work: on a machine shared with other work, two processes one
after the other differ several-fold, which no few rounds average out. It prints, per configuration, the
fresh/forked ratio (the mean of the rounds' log-ratios, with a 90% t interval from their spread:
:func:`autotune.evidence.stats.paired`) and, each way, the speed-up (configuration/defaults, paired by round the same
way).

    python benchmarks/fork_vs_fresh.py [--rounds 4] [--models cnn,mlp] [--configs defaults,bf16,fast]
                                       [--fresh-imports server|child] [--both threads=1] [--together]
    python benchmarks/fork_vs_fresh.py --pool benchmarks/results/fork_vs_fresh-DATE.json ... [--out NAME]

``--fresh-imports child``: the fresh interpreter imports only what a trial needs (not ``torch._dynamo``, which the
server imports so that a compiled trial finds it loaded). The machine's load (other processes' cores, measured by
:mod:`autotune.machine.load`) is recorded before, after and during each trial. Writes
benchmarks/results/fork_vs_fresh-<date>.{txt,json}.
"""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import harness
from autotune.workloads.contract import WorkloadSpec
from harness import say

MODELS = {"cnn": "autotune.examples:cnn", "mlp": "autotune.examples:mlp"}

#: The configurations measured besides the defaults, by model: what the README's runs pick and what a CPU's
#: native bf16 changes most (a bf16 step runs oneDNN's kernels, JIT-compiled in the process on first use).
CONFIGS = {
    "cnn": {"bf16": {"precision": "bf16"},
            "fast": {"precision": "bf16", "memory_format": "channels_last", "optimizer_impl": "fused"}},
    "mlp": {"bf16": {"precision": "bf16"},
            "fast": {"precision": "bf16", "batch_size": 128, "optimizer_impl": "fused"}},
}

#: A trial answered in a freshly started interpreter: the server's imports, then the child's entry, unchanged.
FRESH = """
import json, sys
import autotune.trial.child
if sys.argv[4] == "server":
    import torch._dynamo  # noqa: F401 - as autotune.trial.forkserver.serve imports it
from autotune.trial.child import main
from autotune.trial.messages import from_wire
with open(sys.argv[1]) as fh:
    request = from_wire(json.load(fh))
print("ready", flush=True)
sys.stdin.readline()  # the go: a trial measured together with a forked one starts when that one is spawned
main(request, sys.argv[2], sys.argv[3])
"""


class FreshTrial:
    """One trial in a freshly started interpreter, in a session of its own, with the fork server's environment:
    :meth:`start` it (the interpreter imports what the server imported, then waits), :meth:`go`, then :meth:`result`."""

    def __init__(self, request: Any, imports: str, timeout_s: float) -> None:
        from autotune.trial import forkserver

        env = forkserver.server_environment(dict(os.environ))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(harness.ROOT), os.getcwd(), env.get("PYTHONPATH")) if p)
        self.tmp = tempfile.TemporaryDirectory(prefix="autotune-fresh-")
        self.result_path = Path(self.tmp.name, "result.json")
        self.log = Path(self.tmp.name, "output.log")
        req = Path(self.tmp.name, "request.json")
        request = dataclasses.replace(request, sys_path=tuple(sys.path), cwd=os.getcwd(), progress_path=None)
        req.write_text(json.dumps(request.to_wire()))
        self.timeout_s = timeout_s
        self.proc = subprocess.Popen([sys.executable, "-c", FRESH, str(req), str(self.result_path), str(self.log),
                                      imports], env=env, start_new_session=True, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def start(self) -> FreshTrial:
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the fresh interpreter did not start: {self.proc.communicate()[1][-2000:]}")
        return self

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()  # communicate() closes it

    def result(self) -> dict[str, Any]:
        try:
            _, err = self.proc.communicate(timeout=self.timeout_s)
            if not self.result_path.exists():
                tail = self.log.read_text()[-2000:] if self.log.exists() else err[-2000:]
                raise RuntimeError(f"the fresh trial wrote no result (exit {self.proc.returncode}): {tail}")
            return json.loads(self.result_path.read_text())
        finally:
            self.proc.kill()
            self.tmp.cleanup()


def fresh_trial(request: Any, imports: str, timeout_s: float) -> dict[str, Any]:
    """One trial in a freshly started interpreter (:class:`FreshTrial`), now."""
    trial = FreshTrial(request, imports, timeout_s).start()
    trial.go()
    return trial.result()


# ---------------------------------------------------------------- the state a trial starts in

STATE_DIR = "FORK_VS_FRESH_STATE"  # where state_probe writes (in the environment of the server and the fresh trials)


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


def _disposition(handler: Any) -> str:
    return {signal.SIG_DFL: "default", signal.SIG_IGN: "ignored"}.get(handler, getattr(handler, "__name__", "handler"))


def process_state() -> dict[str, Any]:
    """What a trial process starts with that could shape its speed or behaviour, read before its workload is built:
    glibc's heap (mallinfo2, and the smallest block it serves with mmap now), threads, torch's thread counts, signal
    dispositions, session and scheduling, the garbage collector, modules, open files, the environment."""
    import torch

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _Mallinfo2
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    info = libc.mallinfo2()
    mmap_from = None
    for size in (2**k for k in range(17, 26)):  # 128 KiB (glibc's starting threshold) to 32 MiB (its dynamic most)
        before = libc.mallinfo2().hblks
        block = libc.malloc(size)
        mapped = libc.mallinfo2().hblks > before
        libc.free(block)
        if mapped:
            mmap_from = size
            break
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return {
        "heap bytes in use": info.uordblks, "heap bytes free": info.fordblks, "heap free chunks": info.ordblks,
        "heap top (trimmable)": info.keepcost, "mmap threshold": mmap_from,
        "threads": len(os.listdir("/proc/self/task")),
        "torch threads (intra, inter)": [torch.get_num_threads(), torch.get_num_interop_threads()],
        "signals": {name: _disposition(signal.getsignal(getattr(signal, name)))
                    for name in ("SIGINT", "SIGTERM", "SIGPIPE", "SIGCHLD", "SIGXFSZ")},
        "session leader": os.getsid(0) == os.getpid(), "process group leader": os.getpgrp() == os.getpid(),
        "nice": os.nice(0), "cores allowed": sorted(os.sched_getaffinity(0)),
        "resident (VmRSS)": status.get("VmRSS", "").strip(),
        "gc (enabled, thresholds)": [gc.isenabled(), list(gc.get_threshold())],
        "modules": len(sys.modules), "open files": len(os.listdir("/proc/self/fd")),
        "environment": sorted(k for k in os.environ if k not in ("PYTHONPATH", STATE_DIR)),
    }


def state_probe() -> Any:
    """A workload factory: writes :func:`process_state` into ``$FORK_VS_FRESH_STATE``, then builds the mlp."""
    import autotune.examples

    folder = Path(os.environ[STATE_DIR])
    (folder / f"{os.getpid()}.json").write_text(json.dumps(process_state()))
    return autotune.examples.mlp()


def states(imports: str) -> dict[str, dict[str, Any]]:
    """:func:`process_state` as a forked trial and as a fresh interpreter's trial start (a workload probe each)."""
    from autotune.trial.messages import ProbeRequest
    from autotune.trial.runner import Runner

    folder = Path(os.environ[STATE_DIR])
    out = {}
    for way in ("forked", "fresh"):
        for old in folder.glob("*.json"):
            old.unlink()
        if way == "forked":
            Runner(WorkloadSpec("fork_vs_fresh:state_probe")).probe()
        else:
            fresh_trial(ProbeRequest(spec=WorkloadSpec("fork_vs_fresh:state_probe"), device="cpu"), imports, 300)
        (path,) = folder.glob("*.json")
        out[way] = json.loads(path.read_text())
    return out


# ---------------------------------------------------------------- speeds


def main() -> None:
    ap = harness.arguments(__doc__)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--models", default="cnn,mlp", help="comma-separated, of: " + ", ".join(MODELS))
    ap.add_argument("--configs", default="defaults,bf16,fast",
                    help="comma-separated, of: defaults (always measured: the speed-ups' reference), bf16, fast")
    ap.add_argument("--fresh-imports", choices=("server", "child"), default="server")
    ap.add_argument("--together", action="store_true",
                    help="measure each pair at the same time (two trials on the machine at once, each seeing the "
                         "same other work: use with --both threads=1 on a machine of 2 cores or more)")
    ap.add_argument("--both", action="append", default=[],
                    help="A knob set in every configuration, the defaults included, NAME=VALUE (repeatable): "
                         "threads=1 makes each process less sensitive to other processes on a shared machine")
    ap.add_argument("--pool", nargs="+", default=None, metavar="JSON",
                    help="measure nothing: the summary over these earlier runs' results (same --both, --together)")
    args = ap.parse_args()
    if args.pool:
        return pool(args)

    from autotune import knobs
    from autotune import result as R
    from autotune.machine import hardware, identity, load
    from autotune.trial.messages import TrialRequest
    from autotune.trial.protocol import Settings
    from autotune.trial.runner import Runner, warm_up

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    state_dir = tempfile.TemporaryDirectory(prefix="fork-vs-fresh-state-")
    os.environ[STATE_DIR] = state_dir.name  # before the server starts: it and its children inherit it
    warm_up()
    before = load.other_cores_now(2.0)
    flags = harness.cpu_flags()[0]
    say(f"machine: {identity.short(hardware.fingerprint('cpu'))}; {harness.cpu_model()}, {os.cpu_count()} CPUs; "
        f"bf16 in hardware: {'yes' if 'avx512_bf16' in flags or 'amx_bf16' in flags else 'no'} "
        f"({' '.join(f for f in flags if 'bf16' in f or 'amx' in f) or 'no bf16 flags'}); "
        f"{time.strftime('%Y-%m-%d %H:%M')}")
    say(f"other processes used {before['other_cores']:.2f} cores before the run; {args.rounds} rounds"
        + (", each pair measured at the same time (each trial's other processes include the other)"
           if args.together else ", each pair one after the other") + "; the fresh "
        f"interpreter imports {'as the server does' if args.fresh_imports == 'server' else 'what a trial needs'}")
    seen = states(args.fresh_imports)
    differ = {key: {way: seen[way][key] for way in seen} for key in seen["forked"]
              if seen["forked"][key] != seen["fresh"][key]}
    say("the state a trial starts in (read by its workload's factory), where forked and fresh differ:")
    for key, ways in differ.items():
        say(f"  {key}: forked {ways['forked']}, fresh {ways['fresh']}")
    say("  the same: " + ", ".join(key for key in seen["forked"] if key not in differ))
    both = knobs.parse_assignments(args.both)
    if both:
        say(f"every configuration, the defaults included, with {knobs.short({**knobs.defaults(), **both})}")
    settings = Settings().lean()
    data: dict[str, Any] = {"before_other_cores": before["other_cores"], "rounds": args.rounds,
                            "fresh_imports": args.fresh_imports, "both": both, "together": args.together,
                            "state": seen, "models": {}}
    # rates[model][config][way] = [(round id, samples/s)]; busy[...] = other processes' cores during each trial
    rates: dict[str, dict[str, dict[str, list[tuple[str, float]]]]] = {}
    busy: list[float] = []
    started = time.perf_counter()
    for model in models:
        configs = {"defaults": both, **{name: {**both, **extra} for name, extra in CONFIGS[model].items()
                                         if name in args.configs.split(",")}}
        rates[model] = {name: {"forked": [], "fresh": []} for name in configs}
        runner = Runner(WorkloadSpec(MODELS[model]), settings=settings)
        for k in range(args.rounds):
            for j, (name, extra) in enumerate(configs.items()):
                config = {**knobs.defaults(), **extra}
                ways = ("forked", "fresh") if (k + j) % 2 == 0 else ("fresh", "forked")
                request = TrialRequest(spec=runner.spec, device="cpu", config=dict(config), settings=settings)
                results: dict[str, Any] = {}
                if args.together:  # both at once: the fresh interpreter imports first, then both trials begin
                    fresh = FreshTrial(request, args.fresh_imports, runner.timeout_s).start()
                    fresh.go()
                    results["forked"] = runner.measure(config)
                    results["fresh"] = R.TrialResult.from_dict(fresh.result())
                else:
                    for way in ways:
                        results[way] = (runner.measure(config) if way == "forked" else R.TrialResult.from_dict(
                            fresh_trial(request, args.fresh_imports, runner.timeout_s)))
                got = {}
                for way in ways:
                    res = results[way]
                    if not res.ok:
                        raise SystemExit(f"{model} {name} {way}: {res.outcome}: {res.error}")
                    rates[model][name][way].append((f"r{k}", res.samples_per_s))
                    busy.append(float(res.load.get("other_cores", 0.0)))
                    got[way] = res.samples_per_s
                order = "together" if args.together else f"{ways[0]} first"
                say(f"{model} round {k + 1} {name:>8}: forked {got['forked']:7.0f}, fresh {got['fresh']:7.0f} "
                    f"samples/s ({order}): fresh/forked {got['fresh'] / got['forked']:.2f}; other processes "
                    f"{busy[-2]:.2f}, {busy[-1]:.2f} cores")
    after = load.other_cores_now(2.0)
    loads = busy + [before["other_cores"], after["other_cores"]]
    shared = max(loads) >= load.busy_threshold(os.cpu_count() or 1)
    say(f"{time.perf_counter() - started:.0f} s; other processes used {after['other_cores']:.2f} cores after the run"
        + (f"; during the trials median {sorted(busy)[len(busy) // 2]:.2f}, most {max(busy):.2f} cores of "
           f"{os.cpu_count()}" if busy else "")
        + ("; THE MACHINE WAS SHARED with other work: speeds vary several-fold between processes" if shared else ""))
    data["shared"] = shared
    data["after_other_cores"] = after["other_cores"]
    data["trial_other_cores"] = busy
    say()
    for model in models if args.rounds else ():
        data["models"][model] = summary(model, rates[model], both)
    harness.write(args, data)


def summary(model: str, rates: dict[str, dict[str, list[tuple[str, float]]]], both: dict[str, Any]) -> dict[str, Any]:
    """Print and return, for each configuration of ``model``, fresh/forked, each way's speed-up, and the fresh
    speed-up over the forked one (how much a claim made of forked trials would miss a fresh process's ratio)."""
    from autotune import knobs
    from autotune.evidence import stats

    say()
    say(f"{model}: fresh/forked is a fresh interpreter's samples/s over the forked trial's; speed-up the configuration "
        "over the defaults each way; fresh/forked speed-up their ratio; each paired by round (90% interval)")
    out: dict[str, Any] = {}
    base = rates["defaults"]
    for name, ways in rates.items():
        entry: dict[str, Any] = {"rates": ways,
                                 "fresh_over_forked": stats.paired(ways["fresh"], ways["forked"]).to_dict()}
        shown = knobs.short({**knobs.defaults(), **both, **CONFIGS[model].get(name, {})}) or "the defaults"
        line = (f"{model} {name:>8} ({shown}): forked {stats.geomean(v for _, v in ways['forked']):.0f}, "
                f"fresh {stats.geomean(v for _, v in ways['fresh']):.0f} samples/s; fresh/forked "
                f"{entry['fresh_over_forked']['text']}")
        if name != "defaults":
            for way in ("forked", "fresh"):
                entry[f"speedup_{way}"] = stats.paired(ways[way], base[way]).to_dict()
            per_round = {way: [(r, v / dict(base[way])[r]) for r, v in ways[way] if r in dict(base[way])]
                         for way in ("forked", "fresh")}
            entry["speedup_fresh_over_forked"] = stats.paired(per_round["fresh"], per_round["forked"]).to_dict()
            line += (f"; speed-up forked {entry['speedup_forked']['text']}, fresh {entry['speedup_fresh']['text']}, "
                     f"fresh/forked speed-up {entry['speedup_fresh_over_forked']['text']}")
        say(line)
        out[name] = entry
    return out


def pool(args: Any) -> None:
    """``--pool FILE ...``: the summary over the rounds of earlier runs' results (their rounds kept apart by file), for
    runs of the same settings; nothing is measured."""
    runs = [json.loads(Path(f).read_text()) for f in args.pool]
    settings = {(json.dumps(r["results"].get("both", {}), sort_keys=True), r["results"].get("together")) for r in runs}
    if len(settings) != 1:
        raise SystemExit(f"--pool: the runs differ in --both or --together ({sorted(settings)}): not one measurement")
    both = runs[0]["results"].get("both", {})
    say(f"pooled: {', '.join(args.pool)}")
    data: dict[str, Any] = {"pooled": list(args.pool), "both": both, "models": {}}
    merged: dict[str, dict[str, dict[str, list[tuple[str, float]]]]] = {}
    for i, run in enumerate(runs):
        for model, configs in run["results"]["models"].items():
            for name, entry in configs.items():
                for way, pairs in entry["rates"].items():
                    merged.setdefault(model, {}).setdefault(name, {}).setdefault(way, []).extend(
                        (f"f{i}-{r}", v) for r, v in pairs)
    for model, rates in merged.items():
        data["models"][model] = summary(model, {"defaults": rates.pop("defaults"), **rates}, both)
    harness.write(args, data)

if __name__ == "__main__":
    main()

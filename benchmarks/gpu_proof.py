"""The CUDA path proven in one short run: the fork server stays CUDA-clean while its trials use the GPU, every GPU
test passes, every GPU knob is shown applied by the trial's own evidence, and two short studies end with a verdict.

    python benchmarks/gpu_proof.py [--device cuda:0] [--trials 5] [--budget 8m] [--results-dir DIR]

At most --budget (8 minutes) on one H100: a part that would start past it is skipped and says so. Everything it
writes goes under one folder (--results-dir, default benchmarks/results):

- gpu_proof_<device>-<date>.txt: what it printed, under a header naming the device, its driver, CUDA and torch;
- .json: every figure and every piece of evidence; .md: the tables for docs/results.md;
- gpu_proof_<device>-<date>/: pytest's log of ``pytest -m gpu`` and the studies' SQLite files.

The parts:

1. fork server: a trial of the cnn example on the device, while a thread lists the GPU's processes (NVML, or
   nvidia-smi): the trial's process holds a context, the fork server never does, nor maps libcuda.
2. ``pytest -m gpu``: every test passes and none is skipped.
3. knobs: each GPU knob against the defaults, in real trials, judged by what the trial itself reports: kernel names
   in its profile (TF32, bf16, fp16, NHWC, fused and foreach optimizer kernels, pinned copies, CUDA graph launches,
   forward ops run again by activation checkpointing) and the state it found in force (cuDNN benchmark read back
   from torch, the GradScaler's scale, the allocator's expandable segments, the batches the step received), never
   the configuration it was given. Each compile mode's time to first step, too.
4. studies: ``autotune run --quick`` as a function (:func:`autotune.tuning.preparation.prepare`), of the cnn example
   and of torchvision's ResNet-18 at 64x64 images: the verdict, its interval, MFU, time to first step by compile
   mode.

With ``--device cpu`` (or on a machine without CUDA) it runs every line a CPU can: CUDA-only knobs and checks say
n/a, and ``pytest -m gpu`` skips (which is what it must do without a GPU).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import harness
from harness import say

from autotune import knobs
from autotune.trial import forkserver
from autotune.machine import hardware
from autotune import result as R
from autotune.evidence import evidence_of
from autotune.trial.protocol import Settings
from autotune.request import TuneConfig
from autotune.trial.runner import Runner
from autotune.units import format_bytes, format_duration, parse_duration
from autotune.workloads.contract import WorkloadSpec

CNN = WorkloadSpec("autotune.examples:cnn")
MLP = WorkloadSpec("autotune.examples:mlp")
RESNET18 = WorkloadSpec("autotune.examples:resnet18", model_args=(("image_size", 64), ("num_classes", 100)))
#: Trials of the knob part: short windows, two profiled steps (the evidence), no FLOP count but where MFU is shown.
SETTINGS = dataclasses.replace(Settings.quick(), profile_steps=2, count_flops=False)
COMPILE_LIMIT_S = 120.0  # a compile mode's first step in the knob part (max-autotune may take longer: said as such)
STUDY_COMPILE_LIMIT_S = 60.0  # --compile-limit of the short studies: a handful of trials in a few minutes
STARTED = time.monotonic()


def left(budget: float) -> float:
    return budget - (time.monotonic() - STARTED)


def device_slug(device: str) -> str:
    if device == "cpu":
        return "cpu"
    import torch

    return re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(device).lower()).strip("-")


# ---------------------------------------------------------------- 1. the fork server


def libcuda_mapped(pid: int | None) -> bool | None:
    """Whether a process has the CUDA driver library mapped (None: it cannot be read)."""
    if pid is None:
        return None
    try:
        return "libcuda.so" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return None


MAPS_PROBE = """
import json, os, sys
def mapped():
    return "libcuda.so" in open(f"/proc/{os.getpid()}/maps").read()
steps = []
import torch
steps.append(["import torch", mapped()])
import autotune.trial.child
steps.append(["import autotune.trial.child", mapped()])
import torch._dynamo
steps.append(["import torch._dynamo", mapped()])
torch.cuda.is_available()
steps.append(["torch.cuda.is_available() (NVML)", mapped()])
print(json.dumps({"steps": steps, "initialized": torch.cuda.is_initialized()}))
"""


def libcuda_steps() -> dict[str, Any]:
    """The fork server's start, step by step in a fresh interpreter with its environment: after which step the CUDA
    driver library is mapped, and whether CUDA was initialised (a mapped library is not an initialised driver)."""
    env = forkserver.server_environment(dict(os.environ))
    done = subprocess.run([sys.executable, "-c", MAPS_PROBE], capture_output=True, text=True, env=env, timeout=120)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": (done.stderr or done.stdout)[-500:]}


def fork_server_part(device: str) -> dict[str, Any]:
    say("1. fork server: a trial on the device while the GPU's processes are listed")
    server = forkserver.get()
    server.start()
    seen: list[list[int]] = []
    done = threading.Event()
    cuda = device != "cpu"

    def watch() -> None:
        while not done.wait(0.25):
            pids = hardware.gpu_pids(device)
            if pids is not None:
                seen.append(pids)

    watcher = threading.Thread(target=watch, daemon=True)
    if cuda:
        watcher.start()
    started = time.perf_counter()
    result = Runner(CNN, device=device, settings=SETTINGS).measure({"batch_size": 64})
    done.set()
    if cuda:
        watcher.join(5)
    trial_pid = result.notes.get("pid")
    listed = sorted({p for pids in seen for p in pids})
    out = {
        "server_pid": server.pid, "trial_pid": trial_pid, "trial_outcome": result.outcome,
        "trial_error": (result.error or {}).get("message"), "wall_s": round(time.perf_counter() - started, 1),
        "gpu_process_lists": len(seen), "gpu_pids_seen": listed,
        "server_holds_context": (server.pid in listed) if cuda and seen else None,
        "trial_held_context": (trial_pid in listed or (bool(listed) and server.pid not in listed))
                              if cuda and seen else None,
        "server_maps_libcuda": libcuda_mapped(server.pid),
        "cuda_clean": forkserver.cuda_clean() is None,  # this process may have started CUDA: it forks nothing
        "peak_reserved_bytes": result.memory.get("peak_reserved_bytes"),
        "steady_reserved_bytes": result.memory.get("steady_reserved_bytes"),
    }
    used_gpu = bool(out["peak_reserved_bytes"]) if cuda else None
    out["trial_used_gpu"] = used_gpu
    # Before each fork the server checks torch.cuda.is_initialized() and refuses the trial when it is set: a trial
    # that ran was forked from a server that had not initialised CUDA. A mapped libcuda is recorded, not judged (the
    # first GPU run found it mapped by an import, with no context: libcuda_steps says which).
    checks = [("the trial ran (forked: the server's guard found CUDA uninitialised)", result.ok)]
    if cuda:
        out["libcuda_steps"] = libcuda_steps()
        checks += [
            ("the trial used the GPU (its allocator's peak)", bool(used_gpu)),
            ("the GPU's process list was read during the trial", bool(seen)),
            ("the fork server held no context on the GPU", out["server_holds_context"] is False),
            ("the server's imports leave CUDA uninitialised", out["libcuda_steps"].get("initialized") is False),
        ]
    else:
        checks.append(("the fork server never mapped libcuda", out["server_maps_libcuda"] is False))
    out["checks"] = {name: bool(ok) for name, ok in checks}
    out["passed"] = all(ok for _, ok in checks)
    for name, ok in checks:
        say(f"   {'ok  ' if ok else 'FAIL'} {name}")
    if cuda:
        steps = out["libcuda_steps"].get("steps") or []
        first = next((name for name, mapped in steps if mapped), None)
        say(f"   the fork server maps libcuda: {out['server_maps_libcuda']}"
            + (f" (first after {first}; no context made)" if first else ""))
    else:
        say("   n/a on cpu: the GPU's process list and the trial's GPU memory")
    if not result.ok:
        say(f"   the trial: {result.outcome}: {out['trial_error']}")
    if out["peak_reserved_bytes"]:
        say(f"   trial peak {format_bytes(out['peak_reserved_bytes'])} reserved (steady state "
            f"{format_bytes(out['steady_reserved_bytes'])}); GPU pids seen: {listed}, server pid {server.pid}")
    return out


# ---------------------------------------------------------------- 2. pytest -m gpu


def pytest_part(device: str, folder: Path, timeout_s: float) -> Callable[[], dict[str, Any]]:
    """Start ``pytest -m gpu`` in the background (beside the knob part, whose evidence is kernels and state, not
    speed); the returned call waits for it, at most ``timeout_s`` from its start, and judges it."""
    say("2. pytest -m gpu (started; beside part 3)")
    log = folder / "pytest_gpu.log"
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-rs", "-p", "no:cacheprovider", "tests"]
    started = time.perf_counter()
    sink = log.open("w")
    proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, text=True, cwd=harness.ROOT)

    def finish() -> dict[str, Any]:
        try:
            code: int | None = proc.wait(timeout=max(1.0, timeout_s - (time.perf_counter() - started)))
            stopped = ""
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code, stopped = None, f"\n(stopped after {timeout_s:.0f} s)"
        sink.close()
        text = log.read_text() + stopped
        log.write_text(text)
        counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error|errors|deselected)", text)}
        out = {"command": " ".join(cmd[1:]), "returncode": code, "counts": counts,
               "wall_s": round(time.perf_counter() - started, 1), "log": log.name}
        passed = counts.get("passed", 0)
        failed = counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0)
        skipped = counts.get("skipped", 0)
        if device == "cpu":
            out["passed"] = failed == 0 and passed == 0  # without CUDA every GPU test skips, none fails
            say(f"2. pytest -m gpu: n/a on cpu: {skipped} skipped, {failed} failed (without CUDA each must skip)")
        else:
            out["passed"] = code == 0 and passed > 0 and failed == 0 and skipped == 0
            say(f"2. pytest -m gpu: {'ok  ' if out['passed'] else 'FAIL'} {passed} passed, {failed} failed, "
                f"{skipped} skipped in {out['wall_s']:.0f} s{stopped.strip() and ' (stopped)'} (log: {log.name})")
            if not out["passed"]:
                for line in text.splitlines()[-40:]:
                    say(f"   | {line}")
        return out

    return finish


# ---------------------------------------------------------------- 3. each knob, shown applied


@dataclasses.dataclass(frozen=True)
class Proof:
    """One knob value against a reference configuration, and how the trial's own evidence tells them apart."""

    knob: str
    value: Any
    spec: WorkloadSpec
    base: dict[str, Any]
    evidence: str  # what is compared, in words
    read: Callable[[R.TrialResult], Any]  # the evidence, from a trial's result
    shown: Callable[[Any, Any], bool]  # (with the knob, without it) -> the knob is shown applied
    cuda_only: bool = True


def kernels(name: str) -> Callable[[R.TrialResult], Any]:
    return lambda r: (r.profile.get("kernels") or {}).get(name)


def applied(name: str) -> Callable[[R.TrialResult], Any]:
    return lambda r: r.applied.get(name)


def flag(path: str) -> Callable[[R.TrialResult], Any]:
    return lambda r: (r.applied.get("flags") or {}).get(path)


def more(a: Any, b: Any) -> bool:
    return a is not None and b is not None and a > b


def some_not_base(a: Any, b: Any) -> bool:
    return bool(a) and not b


PROOFS = (
    Proof("precision", "tf32", MLP, {}, "TF32 GEMM kernels (mlp: no convolutions, whose TF32 is on by default)",
          kernels("tf32"), some_not_base),
    Proof("precision", "bf16", CNN, {}, "bf16 kernels", kernels("bf16"), some_not_base),
    Proof("precision", "fp16", CNN, {}, "fp16 kernels", kernels("fp16"), some_not_base),
    Proof("precision", "fp16", CNN, {}, "the GradScaler's scale (the step's own scaler)", applied("scale"),
          lambda a, b: a is not None and b is None),
    Proof("precision", "bf16", CNN, {}, "the autocast dtype inside the step", applied("step_autocast"),
          lambda a, b: a == "torch.bfloat16" and b is None, cuda_only=False),
    Proof("memory_format", "channels_last", CNN, {}, "NHWC convolution kernels, layout conversions",
          lambda r: (kernels("nhwc")(r), kernels("layout_conversions")(r)),
          lambda a, b: None not in (*a, *b) and (a[0] > b[0] or a[1] < b[1])),
    Proof("memory_format", "channels_last", CNN, {}, "weights in channels-last layout",
          applied("channels_last_weights"), some_not_base, cuda_only=False),
    Proof("cudnn_benchmark", True, CNN, {}, "torch.backends.cudnn.benchmark read back in the trial",
          flag("backends.cudnn.benchmark"), lambda a, b: a is True and b is False),
    Proof("optimizer_impl", "fused", CNN, {}, "fused optimizer kernels", kernels("fused_optimizer"), some_not_base,
          cuda_only=False),
    # on CUDA torch's own default is foreach already: the evidence is the kernels and the optimizer's own switch
    Proof("optimizer_impl", "foreach", CNN, {"threads": 1}, "foreach (multi-tensor) kernels, the optimizer's foreach=",
          lambda r: (kernels("foreach_optimizer")(r), (r.applied.get("optimizer") or {}).get("foreach")),
          lambda a, b: bool(a[0]) and a[1] is True and b[1] is not True, cuda_only=False),
    Proof("pin_memory", True, CNN, {"num_workers": 2}, "page-locked host-to-device copies (and pinned batches)",
          kernels("pinned_copies"), some_not_base),
    Proof("compile", "reduce-overhead", CNN, {}, "CUDA graph launches", kernels("graph_launches"), some_not_base),
    Proof("cuda_allocator", "expandable_segments", CNN, {}, "expandable segments in the allocator",
          applied("expandable_segments"), some_not_base),
    Proof("activation_checkpointing", True, CNN, {}, "forward ops per profiled steps (run again in backward)",
          kernels("forward_ops"), more, cuda_only=False),
    Proof("batch_size", 128, CNN, {}, "samples in the batches the step received", applied("batch_samples"),
          lambda a, b: a == 128 and b != 128, cuda_only=False),
)
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune")


def knob_part(device: str, budget: float) -> dict[str, Any]:
    say("3. every GPU knob, shown applied by the trial's own evidence")
    cuda = device != "cpu"
    runners = {spec: Runner(spec, device=device, settings=SETTINGS, compile_limit_s=COMPILE_LIMIT_S)
               for spec in (CNN, MLP)}
    cache: dict[tuple[WorkloadSpec, str], R.TrialResult] = {}

    def trial(spec: WorkloadSpec, config: dict[str, Any]) -> R.TrialResult:
        key = (spec, repr(sorted(config.items())))
        if key not in cache:
            cache[key] = runners[spec].measure(config)
        return cache[key]

    rows = []
    for p in PROOFS:
        row: dict[str, Any] = {"knob": p.knob, "value": p.value, "model": p.spec.model, "evidence": p.evidence}
        if p.cuda_only and not cuda:
            row.update(verdict="n/a on cpu")
        elif left(budget) < 30:
            row.update(verdict="skipped: out of time")
        else:
            base = {"batch_size": 32, **p.base}
            with_it, without = trial(p.spec, {**base, p.knob: p.value}), trial(p.spec, base)
            if not (with_it.ok and without.ok):
                bad = with_it if not with_it.ok else without
                row.update(verdict=f"FAIL: {bad.outcome}", error=(bad.error or {}).get("message"),
                           not_applicable=bad.not_applicable)
            elif p.knob in with_it.not_applicable:
                row.update(verdict=f"not applied: {with_it.not_applicable[p.knob]}")
            else:
                a, b = p.read(with_it), p.read(without)
                row.update(with_knob=a, without=b, verdict="shown" if p.shown(a, b) else "NOT shown")
        rows.append(row)
        shown = {k: row[k] for k in ("with_knob", "without") if k in row}
        say(f"   {row['verdict']:<14} {p.knob}={knobs.KNOBS[p.knob].format(p.value)}: {p.evidence}"
            + (f" ({shown['with_knob']!r} against {shown['without']!r})" if shown else ""))
    first_steps = []
    for mode in COMPILE_MODES:
        if mode != "off" and (left(budget) < COMPILE_LIMIT_S + 30):
            first_steps.append({"compile": mode, "outcome": "skipped: out of time"})
            continue
        if not cuda and mode in ("reduce-overhead",):
            first_steps.append({"compile": mode, "outcome": "n/a on cpu"})
            continue
        r = trial(CNN, {"batch_size": 32, "compile": mode})
        first_steps.append({"compile": mode, "outcome": r.outcome, "time_to_first_step_s": r.time_to_first_step_s,
                            "samples_per_s": r.samples_per_s, "peak_memory_bytes": r.peak_memory_bytes,
                            "error": (r.error or {}).get("message")})
    say("   time to first step by compile mode (cnn, batch 32): " + "; ".join(
        f"{f['compile']} {format_duration(f['time_to_first_step_s'])}" if f.get("time_to_first_step_s") is not None
        else f"{f['compile']} {f['outcome']}" for f in first_steps))
    return {"rows": rows, "first_steps": first_steps,
            "passed": all(r["verdict"] in ("shown", "n/a on cpu") for r in rows)}


# ---------------------------------------------------------------- 4. two short studies


def torchvision_imports() -> bool:
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - a torchvision built for another torch raises all sorts
        return False
    return True


def study_part(device: str, spec: WorkloadSpec, trials: int, folder: Path, budget: float,
               share: float = 1.0) -> dict[str, Any]:
    from autotune.tuning import preparation

    name = spec.model.split(":")[-1]
    say(f"4. a short study of {name} ({trials} trials, --quick)")
    if left(budget) < 60:
        say("   skipped: out of time")
        return {"model": spec.model, "skipped": "out of time"}
    if spec.model.endswith("resnet18") and not torchvision_imports():
        say("   n/a: torchvision does not import here (the GPU machines have it)")
        return {"model": spec.model, "skipped": "torchvision does not import here"}
    # the study's own deadline keeps it inside the proof's budget (the phases after the search reserve their share)
    job = TuneConfig(spec=spec, trials=trials, quick=True, seed=0, confirm=2, compile_limit_s=STUDY_COMPILE_LIMIT_S,
                     time_budget_s=max(60.0, (left(budget) - 20) * share))
    store = harness.open_store(harness.sqlite_url(folder / f"{name}.db"))
    started = time.perf_counter()
    try:
        prepared = preparation.prepare(job, name, store, device)
        for line in prepared.opening():
            say(f"   {line}")
        summary = prepared.run()
    except Exception as exc:  # noqa: BLE001 - a study that cannot run is this part's finding
        say(f"   FAIL: {type(exc).__name__}: {exc}")
        return {"model": spec.model, "error": f"{type(exc).__name__}: {exc}", "passed": False}
    view = store.read(name)
    ev = evidence_of(view)
    verdict = ev.verdict()
    winner = next((t for t in view.trials if t.number == verdict.winner), None)
    first_by_mode: dict[str, list[float]] = {}
    for t in view.trials:
        tts = (t.result or {}).get("time_to_first_step_s")
        if t.ok and tts is not None:
            first_by_mode.setdefault(str(t.config.get("compile", "off")), []).append(float(tts))
    out = {
        "model": spec.model, "trials": trials, "wall_s": round(time.perf_counter() - started, 1),
        "summary": summary.text(), "verdict": verdict.to_dict(),
        "mfu": (winner.result or {}).get("mfu") if winner else None,
        "winner_config": dict(winner.config) if winner else None,
        "time_to_first_step_by_compile": {k: round(statistics.median(v), 2) for k, v in first_by_mode.items()},
        "outcomes": {o: sum(1 for t in view.trials if t.outcome == o) for o in {t.outcome for t in view.trials}},
    }
    out["passed"] = verdict.state in ("gain", "no_gain")
    say(f"   verdict: {verdict.text}")
    say(f"   MFU of #{verdict.winner}: {out['mfu']:.1%}" if out["mfu"] else f"   MFU of #{verdict.winner}: n/a "
        "(a CPU, or a device without a known peak)")
    say("   time to first step by compile mode: " + "; ".join(
        f"{k} {format_duration(v)}" for k, v in sorted(out["time_to_first_step_by_compile"].items())))
    say(f"   trials by outcome: {out['outcomes']}; {out['wall_s']:.0f} s")
    return out


# ---------------------------------------------------------------- the run


def markdown(device: str, proofs: dict[str, Any], studies: list[dict[str, Any]]) -> str:
    lines = ["| knob | value | evidence (from the trial) | with | without | |", "| --- | --- | --- | --- | --- | --- |"]
    for r in proofs.get("rows", []):
        lines.append(f"| `{r['knob']}` | {r['value']} | {r['evidence']} | {r.get('with_knob', '')} | "
                     f"{r.get('without', '')} | {r['verdict']} |")
    lines += ["", "| study | verdict | MFU | time to first step by compile mode |", "| --- | --- | --- | --- |"]
    for s in studies:
        if "verdict" in s:
            ttfs = ", ".join(f"{k} {v:.1f} s" for k, v in sorted(s["time_to_first_step_by_compile"].items()))
            mfu = f"{s['mfu']:.1%}" if s.get("mfu") else "n/a"
            lines.append(f"| {s['model']} | {s['verdict']['text']} | {mfu} | {ttfs} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = harness.arguments(__doc__, trials=5)
    parser.add_argument("--device", default=None, help="cuda:N or cpu (default: cuda:0 where there is one)")
    parser.add_argument("--budget", default="8m", help="stop starting parts after this long (default 8m)")
    parser.add_argument("--parts", default="forkserver,pytest,knobs,studies",
                        help="which parts, in order (default: all four)")
    args = parser.parse_args()
    device = hardware.check_device(args.device) if args.device else hardware.default_device()
    budget = parse_duration(args.budget)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    name = f"gpu_proof_{device_slug(device)}"
    stem = harness.dated(Path(args.results_dir), args.out or name)
    folder = stem.with_name(stem.name)
    folder.mkdir(parents=True, exist_ok=True)
    head = harness.header()
    say(f"device {device}: {head.get('gpu') or 'no GPU'}; torch {head['torch']}; budget {format_duration(budget)}")
    results: dict[str, Any] = {"device": device, "budget_s": budget}
    studies: list[dict[str, Any]] = []

    def keep() -> None:  # after each part: a run stopped from outside still leaves what it found
        harness.write(args, results, name=name, files={".md": markdown(device, results.get("knobs", {}), studies)})

    if "forkserver" in parts:
        results["fork_server"] = fork_server_part(device)
        keep()
    pytest_done = pytest_part(device, folder, max(60.0, min(300.0, left(budget) - 240))) if "pytest" in parts else None
    if "knobs" in parts:
        results["knobs"] = knob_part(device, budget)
        keep()
    if pytest_done is not None:
        results["pytest_gpu"] = pytest_done()  # before the studies, which measure speed on a GPU of their own
        keep()
    if "studies" in parts:
        results["studies"] = studies
        specs = (CNN, RESNET18)
        for i, spec in enumerate(specs):
            studies.append(study_part(device, spec, args.trials, folder, budget, share=1 / (len(specs) - i)))
            keep()
    results["wall_s"] = round(time.monotonic() - STARTED, 1)
    failed = [k for k, v in results.items() if isinstance(v, dict) and v.get("passed") is False]
    failed += [s["model"] for s in studies if s.get("passed") is False]
    say(f"done in {results['wall_s']:.0f} s: "
        + ("every part passed" if not failed else f"FAILED: {', '.join(failed)}"))
    results["failed"] = failed
    keep()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

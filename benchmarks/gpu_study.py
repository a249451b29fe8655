"""Does a study's claim hold in a user's own training loop? One study of a GPT-2-shaped model that is not among
autotune's examples, run as a user types it, then its recommendation against PyTorch's defaults and against the
performance guide's recipe, each in a plain training loop in fresh processes.

    python benchmarks/gpu_study.py [--device cuda:0] [--study-budget 4m] [--loops 3] [--window 20] [--budget 9m]
                                   [--variants abc] [--results-dir DIR]

Run it first whenever a GPU machine is lent (see benchmarks/README.md for the wheels). One call there, with
``.whl`` carried:

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target .site .whl/*.whl &&
        export PYTHONPATH=$PWD/.site:$PWD && python3 benchmarks/gpu_study.py --budget 530s --results-dir $OUT

The parts, at most --budget (9 minutes on a GPU) in all; a part that would start past it is skipped and says so, and
the results are written after each part (a run stopped from outside keeps what it found):

1. the study: ``autotune run --model hf:gpt2`` with 6 layers 512 wide (8 heads), a 32,000-token vocabulary and 256
   tokens per sample (the defaults' batch is 32), ``--time-budget 4m`` (--study-budget), in a process of its own,
   timed from its start to its last line, its study in a SQLite file of the results folder. Read back with
   ``autotune status --json`` and the store: the verdict, the recommendation's claim (estimate, interval, processes),
   MFU where the product reports it, and the trials' time to first step by compile mode;
2. the export: ``autotune export STUDY -o rec.json`` (the recommendation);
3. the plain loop: the same model built with transformers (``GPT2LMHeadModel``), random tokens with labels = inputs,
   trained in a plain loop: a warm-up that covers compilation, then a timed window (--window: 20 s on a GPU, 5 s on a
   CPU), printing its samples/s. Three variants take turns in fresh processes (ABCABCABC, --loops rounds;
   --variants ab leaves the recipe out, for more rounds of the claim's check in the same minutes):
   (a) the defaults: fp32, batch 32, AdamW, a DataLoader without workers;
   (b) the recommendation, applied as the docs tell a user: ``autotune.load_config("rec.json").apply(model, dataset,
       optimizer)``;
   (c) the PyTorch performance guide's recipe by hand: TF32, bf16 autocast, fused AdamW, ``torch.compile(model)``, a
       DataLoader with 4 workers and pinned memory, batch 32 (on a CPU: bf16 where the CPU has it natively, AdamW's own
       default kernels, no pinning). Windows shrink (to 5 s on a GPU) when the rounds would not fit the budget.

It prints: the study's wall time against its budget (within 5% + 10 s or not); the claim against the plain loop's
(b)/(a) (geometric means over processes) and whether the claim's interval covers it; the recipe's (c)/(a) and the
recommendation over the recipe (b)/(c); MFU as reported; each variant's spread over its processes (min-max, ±%).

Everything goes under --results-dir (default benchmarks/results): gpu_study_<device>-<date>.txt (what it printed,
under a header naming the device, its driver, CUDA and torch), .json (every figure), and the folder
gpu_study_<device>-<date>/ (the study's SQLite file and log, rec.json, each loop process's log).
With ``--device cpu`` (or without CUDA) every part runs on a much smaller model (2 layers 64 wide, 1,000 tokens, 32
per sample), a 90 s study and 5 s windows: a few minutes in all.

``--simulate`` runs the whole proof on the simulated H200 of :mod:`autotune.testing.simulated` (``--shape`` another of
its machines), in simulated time, on the CPU: the study is the product's own preparation and loop against the
simulated device (into the same SQLite file, read back by the same ``status --json`` and ``export`` commands), and the
plain loop's processes are the simulated device's. Its report is the one a GPU gives, and its last line reads
``simulated <device>: study <W> s of <B> s budget; claim <x> (<lo>-<hi>) from <n> processes; loop <r>: covered|not
covered; MFU <m>% of <peak>; energy <j> J/sample``. A few seconds to a minute of CPU.

The budget check is the study's wall time against its budget plus 5%: on a GPU from the command's start to its last
line (importing torch included), the process's exit measured apart and named; simulated, in simulated time.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import harness
from harness import say

from autotune.machine import hardware
from autotune.units import format_duration, parse_duration

STARTED = time.monotonic()
STUDY = "gpu_study"
#: The model's shapes: hf:gpt2's model args (GPT2Config's names) and tokens per sample.
SHAPES = {
    "cuda": {"n_layer": 6, "n_embd": 512, "n_head": 8, "vocab_size": 32000, "seq_len": 256},
    "cpu": {"n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 1000, "seq_len": 32},
}
DEFAULTS = {  # per device type: the study's budget, the loop's window, the whole run's budget, the shortest window
    "cuda": {"study_budget": "4m", "window": 20.0, "budget": "9m", "min_window": 5.0, "warmup_s": 3.0,
             "warmup_steps": 10},
    "cpu": {"study_budget": "90s", "window": 5.0, "budget": "6m", "min_window": 2.0, "warmup_s": 1.0,
            "warmup_steps": 3},
}
#: A loop process's time beside its window (start, imports, building, warm-up, compilation), guessed before the
#: first one of its variant ran, then taken from the last one.
OVERHEAD_GUESS = {"cuda": {"a": 18.0, "b": 64.0, "c": 47.0}, "cpu": {"a": 10.0, "b": 10.0, "c": 60.0}}
START_S = 15.0  # the least a loop process needs beside its window (it is stopped before the budget ends)
LOOP_LEAST_S = {"cuda": 90.0, "cpu": 30.0}  # kept for the loop when the study is stopped from here
VARIANTS = {"a": "defaults", "b": "recommendation", "c": "recipe"}
RESERVE_S = 10.0  # kept at the end for the last writes

LOOP = r"""
import contextlib, json, os, sys, time
spec = json.loads(sys.argv[1])
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from torch.utils.data import DataLoader, Dataset
from transformers import GPT2Config, GPT2LMHeadModel

class Tokens(Dataset):
    # random tokens, labels = inputs (the causal LM shifts them); a small pool, cycled
    def __init__(self, vocab, seq_len, length=1 << 16, pool=64):
        gen = torch.Generator().manual_seed(0)
        self.pool = [torch.randint(0, vocab, (seq_len,), generator=gen) for _ in range(pool)]
        self.length = length
    def __len__(self):
        return self.length
    def __getitem__(self, i):
        ids = self.pool[i % len(self.pool)]
        return {"input_ids": ids, "labels": ids}

shape, variant, device = spec["shape"], spec["variant"], torch.device(spec["device"])
cuda = device.type == "cuda"
torch.manual_seed(0)
vocab = shape["vocab_size"]
model = GPT2LMHeadModel(GPT2Config(n_layer=shape["n_layer"], n_embd=shape["n_embd"], n_head=shape["n_head"],
                                   vocab_size=vocab, bos_token_id=vocab - 1, eos_token_id=vocab - 1, use_cache=False))
model.train()
dataset = Tokens(vocab, shape["seq_len"])
batch_size = spec["batch"]
notes = {}

if variant == "a":  # PyTorch's defaults
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loader = DataLoader(dataset, batch_size=batch_size)
    def step(batch):
        batch = {k: v.to(device) for k, v in batch.items()}
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()
elif variant == "b":  # the recommendation, as the docs tell a user
    import autotune
    cfg = autotune.load_config(spec["rec"])
    model, loader, step = cfg.apply(model, dataset, torch.optim.AdamW(model.parameters(), lr=1e-4))
    batch_size = cfg.knobs["batch_size"]
    notes["knobs"] = cfg.knobs
    notes["device"] = str(cfg.device)
    device = torch.device(cfg.device)
    cuda = device.type == "cuda"
else:  # the performance guide's recipe, by hand
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if cuda else {}))
    compiled = torch.compile(model)
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=4, pin_memory=cuda)
    bf16 = cuda or spec["cpu_bf16"]
    notes.update(bf16=bf16, fused=cuda, workers=4, pin_memory=cuda, tf32=cuda)
    def step(batch):
        batch = {k: v.to(device, non_blocking=cuda) for k, v in batch.items()}
        amp = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
        with amp:
            loss = compiled(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

def batches():
    while True:
        yield from loader

sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
it = batches()
start = time.perf_counter()
loss = step(next(it))
sync()
first = time.perf_counter() - start
steps = 1
# the warm-up's rate by half-seconds after the first step (synchronised at each edge, as a trial's warm-up steps
# are): whether the speed still climbs in the seconds a trial's windows measure, against this process's window
ramp, edge, edge_samples = [], time.perf_counter(), 0
while steps < spec["warmup_steps"] or time.perf_counter() - start < first + spec["warmup_s"]:
    batch = next(it)
    loss = step(batch)
    steps += 1
    edge_samples += int(batch["input_ids"].shape[0])
    if time.perf_counter() - edge >= 0.5:
        sync()
        now = time.perf_counter()
        ramp.append(round(edge_samples / (now - edge), 1))
        edge, edge_samples = now, 0
sync()
warm = time.perf_counter() - start
samples = timed = 0
begin = time.perf_counter()
while time.perf_counter() - begin < spec["window"]:
    batch = next(it)
    loss = step(batch)
    samples += int(batch["input_ids"].shape[0])
    timed += 1
sync()
elapsed = time.perf_counter() - begin
print(json.dumps({"variant": variant, "samples_per_s": samples / elapsed, "batch": batch_size, "steps": timed,
                  "window_s": elapsed, "first_step_s": first, "warmup_s": warm, "warmup_steps": steps,
                  "warmup_rates": ramp,
                  "loss": float(loss), "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
                  "notes": notes}))
"""


def left(budget: float) -> float:
    return budget - (time.monotonic() - STARTED)


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:400]}"


def device_slug(device: str) -> str:
    if device == "cpu":
        return "cpu"
    import torch

    return re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(device).lower()).strip("-")


def claim_text(claim: dict[str, Any]) -> str:
    """A claim as read back: ``2.54x (2.31-2.79)``, or ``2.54x (no interval: not confirmed)`` where it has none."""
    est, low, high = claim.get("estimate"), claim.get("low"), claim.get("high")
    if est is None:
        return "none"
    if low is None or high is None:
        return f"{est:.2f}x (no interval: not confirmed)"
    return f"{est:.2f}x ({low:.2f}-{high:.2f})"


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def cli(*args: str, timeout: float, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, check=False)


def last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:400] if lines else ""


def found(doc: Any, words: tuple[str, ...], path: str = "") -> dict[str, Any]:
    """Every entry of ``doc`` (nested) whose key holds one of ``words``, by its path: the MFU figures, whatever
    shape ``status --json`` gives them."""
    out: dict[str, Any] = {}
    if isinstance(doc, dict):
        for key, value in doc.items():
            here = f"{path}.{key}" if path else str(key)
            if any(w in str(key).lower() for w in words):
                out[here] = value
            else:
                out.update(found(value, words, here))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out.update(found(value, words, f"{path}[{i}]"))
    return out


def mfu_of(status: dict[str, Any]) -> dict[str, Any]:
    """What ``status --json`` says of MFU: its ``efficiency`` entry (the recommendation's and the defaults' MFU, the
    peak, the words), or else any entry named like MFU; empty when it reports none."""
    eff = status.get("efficiency")
    if isinstance(eff, dict):
        rec, base = eff.get("recommended") or {}, eff.get("baseline") or {}
        return {"text": eff.get("text"), "mfu": eff.get("mfu"), "recommended_mfu": rec.get("mfu"),
                "baseline_mfu": base.get("mfu"), "achieved_flops": eff.get("achieved_flops"),
                "peak_flops": eff.get("peak_flops"), "peak_text": eff.get("peak_text"), "hints": eff.get("hints")}
    return {k: v for k, v in found(status, ("mfu", "efficiency")).items() if not isinstance(v, (dict, list))}


def mfu_text(mfu: dict[str, Any] | None) -> str:
    if not mfu:
        return "not reported"
    if "text" in mfu:
        figures = [f"{name} {mfu[key]:.1%}" for name, key in (("recommendation", "recommended_mfu"),
                                                               ("defaults", "baseline_mfu"))
                   if mfu.get(key) is not None]
        return str(mfu["text"]) + (f" (MFU: {', '.join(figures)})" if figures else " (no MFU figure)")
    return "; ".join(f"{k} = {v}" for k, v in mfu.items())


# ---------------------------------------------------------------- 1. the study


def study_part(device: str, shape: dict[str, int], study_budget: float, trials: int, folder: Path, url: str,
               budget: float) -> dict[str, Any]:
    args = ["--model", "hf:gpt2"]
    for key in ("n_layer", "n_embd", "n_head", "vocab_size"):
        args += ["--model-arg", f"{key}={shape[key]}"]
    args += ["--seq-len", str(shape["seq_len"]), "--time-budget", f"{study_budget:g}s", "--trials", str(trials),
             "--device", device, "--study", STUDY, "--storage", url]
    shown = "autotune run " + " ".join(args[:-2]) + " --storage sqlite:///" + Path(url.split("///", 1)[1]).name
    say(f"1. the study: {shown}")
    out: dict[str, Any] = {"command": shown, "budget_s": study_budget}
    # stopped from here only far past its own budget, and before the loops' least share of the run is gone
    least = LOOP_LEAST_S["cpu" if device == "cpu" else "cuda"]
    timeout = max(30.0, min(study_budget * 1.3 + 60, left(budget) - RESERVE_S - least))
    log = folder / "study.log"
    start = time.monotonic()
    code, stdout, stderr, done_at = timed_run(["run", *args], timeout, folder)
    wall = time.monotonic() - start
    log.write_text(stdout + ("\n--- stderr\n" + stderr if stderr else ""))
    out.update(returncode=code, wall_s=round(wall, 1))
    if code is None:
        out["error"] = f"stopped after {timeout:.0f} s"
        say(f"   FAIL: stopped after {timeout:.0f} s (log: {log.name}); what it stored is read all the same")
    elif code != 0:
        out["error"] = last_line(stderr) or last_line(stdout)
        say(f"   FAIL: exit {code}: {out['error']} (log: {log.name})")
    # the study's time: from the command's start to its last line ("done: ..."); the process's exit (the status it
    # prints, the interpreter's end) is measured apart
    study_s = (done_at - start) if done_at is not None else wall
    out.update(study_s=round(study_s, 1), exit_s=round(wall - study_s, 1))
    budget_check(out, study_s, study_budget)
    out.update(read_study(folder, url))
    return out


def budget_check(out: dict[str, Any], study_s: float, budget_s: float) -> None:
    """The study's time against its budget plus 5%, said in one line."""
    limit = budget_s * 1.05
    out["within_budget"] = study_s <= limit
    exit_s = out.get("exit_s")
    say(f"   study time {format_duration(study_s)} ({study_s:.0f} s) against its --time-budget "
        f"{format_duration(budget_s)}: " + ("within" if out["within_budget"] else "OVER") + f" 5% ({limit:.0f} s)"
        + (f"; the process's exit took {exit_s:.1f} s more" if exit_s is not None else ""))


def timed_run(args: list[str], timeout: float, cwd: Path) -> tuple[int | None, str, str, float | None]:
    """``autotune ARGS`` with its lines read as they come: (exit code or None when stopped at ``timeout``, its
    output, its errors, when it printed its ``done:`` line on the monotonic clock, or None)."""
    import threading

    proc = subprocess.Popen([sys.executable, "-m", "autotune.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd)
    lines: list[str] = []
    errors: list[str] = []
    done_at: list[float] = []

    def read_out() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("done: ") and not done_at:
                done_at.append(time.monotonic())
            lines.append(line)

    def read_err() -> None:
        assert proc.stderr is not None
        errors.extend(proc.stderr)

    readers = [threading.Thread(target=read_out, daemon=True), threading.Thread(target=read_err, daemon=True)]
    for reader in readers:
        reader.start()
    try:
        code: int | None = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        code = None
    for reader in readers:
        reader.join(timeout=10)
    return code, "".join(lines), "".join(errors), done_at[0] if done_at else None


def read_study(folder: Path, url: str) -> dict[str, Any]:
    """The study as the read commands and the store give it: verdict, claim, MFU, time to first step."""
    out: dict[str, Any] = {}
    try:
        proc = cli("status", STUDY, "--storage", url, "--json", timeout=120, cwd=folder)
        status = json.loads(proc.stdout) if proc.returncode == 0 else None
        if status is None:
            raise RuntimeError(last_line(proc.stderr) or f"exit {proc.returncode}")
        (folder / "status.json").write_text(json.dumps(status, indent=1) + "\n")
    except Exception as exc:  # noqa: BLE001 - the study's figures are this part's; the rest goes on
        say(f"   status --json: {one_line(exc)}")
        return {"status_error": one_line(exc)}
    verdict = status.get("verdict") or {}
    rec = status.get("recommended") or {}
    speedup = rec.get("speedup") or status.get("speedup") or {}
    out.update(
        trials=status.get("trials"), outcomes=status.get("outcomes"), time_spent_s=status.get("time_spent_s"),
        verdict=verdict, load=(status.get("load") or {}).get("text"), noise=status.get("noise_text"),
        recommended={"trial": rec.get("trial"), "changes": rec.get("changes"),
                     "samples_per_s": rec.get("samples_per_s"), "figure": rec.get("figure")},
        claim={k: speedup.get(k)
               for k in ("estimate", "low", "high", "level", "processes", "baseline_processes", "text")},
        mfu_reported=mfu_of(status),
    )
    say(f"   {status.get('trials')} trials {status.get('outcomes')}; "
        f"time spent {status.get('time_spent_s') or 0:.0f} s")
    say(f"   verdict: {verdict.get('text')}")
    changes = ", ".join(f"{k}={v}" for k, v in (rec.get("changes") or {}).items()) or "the defaults"
    c = out["claim"]
    if c.get("estimate") is not None:
        say(f"   claim (#{rec.get('trial')}: {changes}): {claim_text(c)} ({c.get('level') or 0.9:.0%}), "
            f"{c.get('processes')} processes against {c.get('baseline_processes')} of the defaults; "
            f"figure: {rec.get('figure')}")
    else:
        say(f"   claim: none (#{rec.get('trial')}: {changes})")
    # MFU: what status --json reports (its fields may grow), and the recommended trial's own record in the store
    try:
        view = harness.open_store(url, read_only=True).read(STUDY)
        winner = next((t for t in view.trials if t.number == rec.get("trial")), None)
        out["mfu_of_recommended_trial"] = (winner.result or {}).get("mfu") if winner else None
        first: dict[str, list[float]] = {}
        for t in view.trials:
            tts = (t.result or {}).get("time_to_first_step_s")
            if t.ok and tts is not None:
                first.setdefault(str(t.config.get("compile", "off")), []).append(float(tts))
        out["time_to_first_step_by_compile"] = {k: {"median_s": round(statistics.median(v), 2),
                                                    "min_s": round(min(v), 2), "max_s": round(max(v), 2),
                                                    "trials": len(v)} for k, v in first.items()}
    except Exception as exc:  # noqa: BLE001
        say(f"   the store: {one_line(exc)}")
        out["store_error"] = one_line(exc)
    out["energy_per_sample"] = energy_of(status)
    say(f"   MFU in status --json: {mfu_text(out['mfu_reported'])}")
    say("   energy in status --json: " + (f"{out['energy_per_sample']:.3f} J/sample" if out["energy_per_sample"]
                                          is not None else "not reported"))
    trial_mfu = out.get("mfu_of_recommended_trial")
    say(f"   MFU of the recommended trial (its record): {trial_mfu:.1%}" if trial_mfu else
        "   MFU of the recommended trial (its record): not reported (a CPU, or a device without a known peak)")
    ttfs = out.get("time_to_first_step_by_compile") or {}
    say("   time to first step by compile mode: " + ("; ".join(
        f"{k} {format_duration(v['median_s'])} (median of {v['trials']}, {v['min_s']:.1f}-{v['max_s']:.1f} s)"
        for k, v in sorted(ttfs.items())) or "none measured"))
    return out


# ---------------------------------------------------------------- 2. the export


def export_part(folder: Path, url: str) -> dict[str, Any]:
    rec = folder / "rec.json"
    say(f"2. the export: autotune export {STUDY} -o {rec.name}")
    try:
        proc = cli("export", STUDY, "--storage", url, "-o", str(rec), timeout=120, cwd=folder)
        if proc.returncode != 0 or not rec.exists():
            raise RuntimeError(last_line(proc.stderr) or last_line(proc.stdout) or f"exit {proc.returncode}")
        doc = json.loads(rec.read_text())
    except Exception as exc:  # noqa: BLE001
        say(f"   FAIL: {one_line(exc)}")
        return {"error": one_line(exc)}
    from autotune import knobs

    chosen = doc.get("knobs") or {}
    changes = {k: v for k, v in chosen.items() if knobs.defaults().get(k) != v}
    say("   knobs that differ from the defaults: " + (", ".join(f"{k}={v}" for k, v in changes.items()) or "none")
        + f"; device {doc.get('device')}")
    return {"path": str(rec), "knobs": chosen, "changes": changes, "device": doc.get("device")}


# ---------------------------------------------------------------- 3. the plain loop


def loop_part(device: str, shape: dict[str, int], rec: Path | None, args: Any, folder: Path, budget: float,
              cpu_bf16: bool) -> dict[str, Any]:
    kind = "cuda" if device != "cpu" else "cpu"
    d = DEFAULTS[kind]
    variants = [v for v in args.variants if v != "b" or rec is not None]
    say(f"3. the plain loop: {', '.join(f'({v}) {VARIANTS[v]}' for v in variants)} in turns, {args.loops} rounds, "
        f"{args.window:g} s windows")
    if rec is None:
        say("   (b) skipped: no recommendation was exported")
    overhead = dict(OVERHEAD_GUESS[kind])
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    errors: list[dict[str, Any]] = []
    skipped = ""
    for r in range(args.loops):
        rounds_left = args.loops - r
        # the rounds left share what is left; windows shrink to fit (never below --window's floor), and a round
        # starts only when it fits at that floor
        per_round = sum(overhead[v] for v in variants)
        fits = (left(budget) - RESERVE_S - rounds_left * per_round) / (rounds_left * len(variants))
        window = max(d["min_window"], min(args.window, fits))
        if left(budget) - RESERVE_S < per_round + len(variants) * window:
            skipped = (f"rounds {r + 1}-{args.loops} skipped: out of time (a round needs about "
                       f"{per_round + len(variants) * window:.0f} s, {left(budget):.0f} s left)")
            say(f"   {skipped}")
            break
        line = []
        for v in variants:
            if left(budget) < window + START_S + RESERVE_S:  # each process is stopped before the budget ends anyway
                skipped = f"round {r + 1} ({v}) and later skipped: out of time ({left(budget):.0f} s left)"
                break
            spec = {"variant": v, "device": device, "shape": shape, "batch": args.batch, "window": window,
                    "warmup_s": d["warmup_s"], "warmup_steps": d["warmup_steps"], "rec": str(rec) if rec else None,
                    "cpu_bf16": cpu_bf16}
            log = folder / f"loop_{v}_{r + 1}.log"
            start = time.monotonic()
            timeout = max(30.0, min(window + 300, left(budget) - 5))
            try:
                proc = subprocess.run([sys.executable, "-c", LOOP, json.dumps(spec)], capture_output=True, text=True,
                                      cwd=folder, timeout=timeout, check=False)
                log.write_text(proc.stdout + "\n--- stderr\n" + proc.stderr)
                wall = time.monotonic() - start
                if proc.returncode != 0:
                    raise RuntimeError(f"exit {proc.returncode}: {last_line(proc.stderr)}")
                got = json.loads(proc.stdout.strip().splitlines()[-1])
                # autotune's own line about this training's speed (apply() says it once, on standard error)
                said = [x.strip() for x in proc.stderr.splitlines() if "samples/s" in x]
                got.update(round=r + 1, wall_s=round(wall, 1), autotune_said=said[-1][:300] if said else None)
                runs[v].append(got)
                overhead[v] = max(1.0, wall - window)
                line.append(f"({v}) {got['samples_per_s']:.0f} samples/s (first step {got['first_step_s']:.1f} s, "
                            f"{wall:.0f} s in all)")
            except Exception as exc:  # noqa: BLE001 - one failed process is a finding; the others go on
                wall = time.monotonic() - start
                overhead[v] = max(overhead[v], wall - window)
                errors.append({"variant": v, "round": r + 1, "error": one_line(exc), "log": log.name})
                line.append(f"({v}) FAIL {one_line(exc)[:200]} (log: {log.name})")
        say(f"   round {r + 1} ({window:.1f} s windows): " + "; ".join(line))
        if skipped:
            say(f"   {skipped}")
            break
    return {"variants": {v: VARIANTS[v] for v in variants}, "runs": runs, "errors": errors, "skipped": skipped or None}


# ---------------------------------------------------------------- --simulate: the same parts on the simulated GPU


def simulated_study_part(shape: Any, study_budget: float, trials: int, folder: Path, url: str, seed: int
                         ) -> dict[str, Any]:
    """The study, as ``autotune run`` runs it, on the simulated device in simulated time (the same storage, read
    back by the same commands)."""
    from autotune.testing.simulated import properties, run_study
    from autotune.testing.simulated.study import spec_of

    shown = (f"autotune run --model {spec_of(shape).model} --time-budget {study_budget:g}s --trials {trials} "
             f"--device cuda:0 --study {STUDY} --storage sqlite:///{STUDY}.db")
    say(f"1. the study: {shown} (simulated {shape.device.name}, {shape.name}, in simulated time)")
    out: dict[str, Any] = {"command": shown, "budget_s": study_budget, "simulated": shape.name, "seed": seed}
    began = time.monotonic()
    study = run_study(shape, study_budget, seed, url, STUDY, trials=trials)
    (folder / "study.log").write_text("\n".join(study.lines) + "\n")
    exit_s = shape.workload.exit_s
    out.update(returncode=0, wall_s=round(study.wall_s, 1), study_s=round(study.wall_s - exit_s, 1),
               exit_s=exit_s, processes=study.processes, cpu_s=round(time.monotonic() - began, 1))
    say(f"   {study.processes} simulated processes; {out['cpu_s']:.1f} s of this machine's time")
    budget_check(out, out["study_s"], study_budget)
    out.update(read_study(folder, url))
    checked = properties.check(study)  # what only a simulated device knows: the claimed configuration's truth
    out.update(truth=checked.truth, claim_covers_truth=checked.covered)
    if checked.truth is not None:
        say(f"   the device's truth for the claimed configuration: {checked.truth:.2f}x; the claim "
            + {True: "covers it", False: "does not cover it", None: "has no interval"}[checked.covered])
    return out


def simulated_loop_part(shape: Any, rec: Path | None, args: Any, seed: int) -> dict[str, Any]:
    """The plain loop's variants as fresh processes of the simulated device: the defaults, the exported
    recommendation's knobs, the guide's recipe (bf16, compile, 4 pinned workers, fused AdamW, the same batch)."""
    from autotune.testing.simulated import SimulatedClock, SimulatedRunner
    from autotune.trial.protocol import Settings

    configs: dict[str, dict[str, Any]] = {"a": {"batch_size": args.batch}}
    if rec is not None:
        configs["b"] = dict(json.loads(rec.read_text()).get("knobs") or {})
    if "c" in args.variants:
        configs["c"] = {"precision": "bf16", "compile": "default", "num_workers": 4, "pin_memory": True,
                        "persistent_workers": False, "optimizer_impl": "fused", "batch_size": args.batch}
    say(f"3. the plain loop: {', '.join(f'({v}) {VARIANTS[v]}' for v in configs)} in turns, {args.loops} rounds "
        "(simulated processes)")
    runner = SimulatedRunner(shape, SimulatedClock(), seed + 1000, settings=Settings().lean())
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in configs}
    for r in range(args.loops):
        line = []
        for v, config in configs.items():
            got = runner.measure(config)
            if not got.ok:
                line.append(f"({v}) FAIL {got.outcome}")
                continue
            runs[v].append({"variant": v, "round": r + 1, "samples_per_s": got.samples_per_s,
                            "first_step_s": got.time_to_first_step_s, "wall_s": got.wall_s})
            line.append(f"({v}) {got.samples_per_s:.0f} samples/s (first step {got.time_to_first_step_s:.1f} s)")
        say(f"   round {r + 1}: " + "; ".join(line))
    return {"variants": {v: VARIANTS[v] for v in configs}, "runs": runs, "errors": [], "skipped": None}


def joint_check(claim: dict[str, Any], rates: dict[str, list[float]]) -> dict[str, Any] | None:
    """The loop's (b)/(a) with its own 90% interval (Welch: each variant its own spread over its processes), and the
    claim over the loop, their log half-widths added in quadrature: whether the two estimates of one speed-up differ
    beyond what both sides' noise admits (the loop's ratio is itself an estimate from a few processes; None: the
    loop has fewer than two processes of (a) or (b))."""
    from autotune.evidence import stats

    a, b = rates.get("a") or [], rates.get("b") or []
    if len(a) < 2 or len(b) < 2 or claim.get("low") is None or claim.get("high") is None:
        return None
    loop = stats.welch([(str(i), v) for i, v in enumerate(b)], [(str(i), v) for i, v in enumerate(a)],
                       stats.own_noise(b), stats.own_noise(a))
    claimed = stats.Ratio(claim["estimate"], claim["low"], claim["high"], claim.get("processes") or 0,
                          claim.get("processes") or 0, False)
    both = stats.combined(claimed, loop)
    return {"loop_interval": [loop.low, loop.high],
            "loop_text": f"{loop.estimate:.2f}x ({loop.low:.2f}-{loop.high:.2f})",
            "claim_over_loop": [both.estimate, both.low, both.high],
            "claim_over_loop_text": f"{both.estimate:.2f}x ({both.low:.2f}-{both.high:.2f})",
            "agree": bool(both.includes_one())}


def energy_of(status: dict[str, Any]) -> float | None:
    """The recommendation's joules per sample as ``status --json`` reports it (None: not measured)."""
    for key, value in found(status, ("joules_per_sample",)).items():
        if isinstance(value, (int, float)) and ("recommended" in key or "efficiency" in key or "energy" in key):
            return float(value)
    return None


def simulated_line(results: dict[str, Any], device_name: str) -> str:
    """The run's last line under --simulate."""
    study = results.get("study") or {}
    claim = study.get("claim") or {}
    covers = (results.get("summary") or {}).get("claim_covers_loop")
    b_over_a = (results.get("summary") or {}).get("b_over_a")
    mfu = study.get("mfu_reported") or {}
    peak = mfu.get("peak_text") or "no peak"
    mfu_figure = mfu.get("recommended_mfu") if mfu.get("recommended_mfu") is not None else mfu.get("mfu")
    energy = study.get("energy_per_sample")
    return (f"simulated {device_name}: study {study.get('study_s', 0):.0f} s of {study.get('budget_s', 0):.0f} s "
            f"budget; claim {claim_text(claim)} from {claim.get('processes')} processes; loop "
            + (f"{b_over_a:.2f}x" if b_over_a else "not measured") + ": "
            + ("covered" if covers else "not covered" if covers is False else "no interval to cover it")
            + "; MFU " + (f"{100 * mfu_figure:.0f}% of {peak.split(' of ', 1)[-1]}" if mfu_figure is not None
                          else "not reported")
            + "; energy " + (f"{energy:.3f} J/sample" if energy is not None else "not reported"))


# ---------------------------------------------------------------- 4. the summary


def spread(rates: list[float]) -> dict[str, float]:
    g = geomean(rates)
    return {"geomean": g, "min": min(rates), "max": max(rates),
            "plus_minus_percent": 100 * (max(rates) - min(rates)) / 2 / g, "processes": len(rates)}


def summary(results: dict[str, Any]) -> dict[str, Any]:
    say("4. summary")
    out: dict[str, Any] = {}
    study = results.get("study") or {}
    if "study_s" in study:
        say(f"   study: {study['study_s']:.0f} s against its {study['budget_s']:.0f} s budget "
            f"({study['study_s'] / study['budget_s']:.2f}x; " + ("within" if study.get("within_budget") else "OVER")
            + " 5%)")
    else:
        say("   study: not run")
    runs = (results.get("loop") or {}).get("runs") or {}
    rates = {v: [r["samples_per_s"] for r in rs if r.get("samples_per_s")] for v, rs in runs.items()}
    spreads = {v: spread(x) for v, x in rates.items() if x}
    out["spread"] = spreads
    for v, s in spreads.items():
        say(f"   ({v}) {VARIANTS[v]:<14} {s['geomean']:9.1f} samples/s, geometric mean of {s['processes']} processes; "
            f"spread {s['min']:.1f}-{s['max']:.1f} (±{s['plus_minus_percent']:.1f}%)")
    claim = study.get("claim") or {}

    def ratio(x: str, y: str) -> float | None:
        return spreads[x]["geomean"] / spreads[y]["geomean"] if x in spreads and y in spreads else None

    out["b_over_a"], out["c_over_a"], out["b_over_c"] = ratio("b", "a"), ratio("c", "a"), ratio("b", "c")
    if (results.get("export") or {}).get("changes") == {}:
        say("   the recommendation is the defaults: (b) runs the defaults through load_config().apply")
    if claim.get("estimate") is not None:
        line = f"   claim {claim_text(claim)}"
        if out["b_over_a"] is not None and claim.get("low") is not None and claim.get("high") is not None:
            covered = claim["low"] <= out["b_over_a"] <= claim["high"]
            out["claim_covers_loop"] = covered
            line += (f" against the plain loop's (b)/(a) {out['b_over_a']:.2f}x: "
                     + ("covered" if covered else "not covered"))
            joint = joint_check(claim, rates)
            if joint:
                out.update(joint)
                line += (f"; the loop's own {joint['loop_text']} (each side its own spread between processes); the "
                         f"claim over the loop {joint['claim_over_loop_text']}: "
                         + ("they agree within their joint noise" if joint["agree"] else
                            "they differ beyond their joint noise"))
        elif out["b_over_a"] is not None:
            out["claim_covers_loop"] = None
            line += f"; the plain loop's (b)/(a) {out['b_over_a']:.2f}x (no interval to cover it)"
        else:
            line += "; the plain loop's (b)/(a): not measured"
        say(line)
    else:
        say("   claim: none read" + (f"; the plain loop's (b)/(a) {out['b_over_a']:.2f}x" if out["b_over_a"] else ""))
    say("   the recipe (c)/(a): " + (f"{out['c_over_a']:.2f}x" if out["c_over_a"] else "not measured")
        + "; the recommendation over the recipe (b)/(c): "
        + (f"{out['b_over_c']:.2f}x" if out["b_over_c"] else "not measured"))
    trial_mfu = study.get("mfu_of_recommended_trial")
    say(f"   MFU: status --json: {mfu_text(study.get('mfu_reported'))}; the recommended trial's record: "
        + (f"{trial_mfu:.1%}" if trial_mfu else "not reported"))
    ttfs = study.get("time_to_first_step_by_compile") or {}
    if ttfs:
        say("   time to first step by compile mode (the study's trials): "
            + "; ".join(f"{k} {v['median_s']:.1f} s" for k, v in sorted(ttfs.items())))
    for v, rs in runs.items():  # the warm-up's half-seconds against the window: a climb a trial's windows sit on
        ramps = [(r["warmup_rates"], r["samples_per_s"]) for r in rs if r.get("warmup_rates")]
        if ramps:
            out.setdefault("warmup_rates", {})[v] = [{"half_seconds": x, "window": w} for x, w in ramps]
            say(f"   ({v}) the warm-up's samples/s by half-seconds after the first step, then the window: " + "; ".join(
                " ".join(f"{x:.0f}" for x in ramp) + f" | {w:.0f}" for ramp, w in ramps))
    firsts = {v: [r["first_step_s"] for r in rs] for v, rs in runs.items() if rs}
    if firsts:
        say("   the plain loop's first step: " + "; ".join(
            f"({v}) {min(x):.1f}-{max(x):.1f} s" for v, x in firsts.items()))
    return out


# ---------------------------------------------------------------- the run


def main() -> int:
    parser = harness.arguments(__doc__, trials=30)
    parser.add_argument("--device", default=None, help="cuda:N or cpu (default: cuda:0 where there is one)")
    parser.add_argument("--budget", default=None,
                        help="stop starting parts after this long (default 9m on a GPU, 6m on cpu)")
    parser.add_argument("--study-budget", default=None,
                        help="the study's --time-budget (default 4m on a GPU, 90s on cpu)")
    parser.add_argument("--loops", type=int, default=3,
                        help="rounds of the plain loop: processes of each variant (default 3)")
    parser.add_argument("--window", type=float, default=None, help="each loop process's timed window in seconds "
                        "(default 20 on a GPU, 5 on cpu; shortened when the rounds would not fit the budget)")
    parser.add_argument("--variants", default="abc",
                        help="the loop's variants, in turn: a defaults, b recommendation, c recipe (default abc; ab "
                        "gives the claim's check more rounds in the same minutes)")
    parser.add_argument("--batch", type=int, default=32, help="the batch of the defaults and the recipe (default 32)")
    parser.add_argument("--parts", default="study,export,loop", help="which parts, in order (default: all three)")
    parser.add_argument("--simulate", action="store_true",
                        help="run the proof on the simulated GPU (autotune.testing.simulated), in simulated time")
    parser.add_argument("--shape", default="lm-h200", help="--simulate's machine (default lm-h200, the H200 study's)")
    parser.add_argument("--seed", type=int, default=0, help="--simulate's seed (default 0)")
    parser.add_argument("--summary-of", default=None, metavar="JSON",
                        help="print the summary of an earlier run's results .json again, with this script's summary "
                        "(what it adds since), and stop")
    args = parser.parse_args()
    if args.summary_of:
        say(f"the summary of {args.summary_of}, as this version of gpu_study.py reads it")
        summary(json.loads(Path(args.summary_of).read_text())["results"])
        return 0
    if not args.variants or set(args.variants) - set(VARIANTS) or len(set(args.variants)) != len(args.variants):
        parser.error(f"--variants {args.variants!r}: letters of {''.join(VARIANTS)}, each once")
    args.variants = [v for v in VARIANTS if v in args.variants]
    shape = None
    if args.simulate:
        from autotune.testing.simulated import SHAPES as MACHINES

        if args.shape not in MACHINES:
            parser.error(f"--shape {args.shape!r}: one of {', '.join(MACHINES)}")
        shape = MACHINES[args.shape]
        device = "cuda:0"
    else:
        device = hardware.check_device(args.device) if args.device else hardware.default_device()
    kind = "cpu" if device == "cpu" else "cuda"
    d = DEFAULTS[kind]
    budget = parse_duration(args.budget or d["budget"])
    study_budget = parse_duration(args.study_budget or d["study_budget"])
    args.window = args.window if args.window is not None else d["window"]
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    model_shape = SHAPES[kind]
    slug = (re.sub(r"[^a-z0-9]+", "-", f"simulated {shape.device.name}".lower()).strip("-") if shape is not None
            else device_slug(device))
    name = f"gpu_study_{slug}"
    if args.no_write:
        folder = Path(tempfile.mkdtemp(prefix="gpu_study-"))
    else:
        stem = harness.dated(Path(args.results_dir), args.out or name)
        folder = stem.with_name(stem.name)
        folder.mkdir(parents=True, exist_ok=True)
    url = harness.sqlite_url(folder / f"{STUDY}.db")
    have, _ = harness.cpu_flags()
    cpu_bf16 = bool({"avx512_bf16", "amx_bf16", "bf16"} & set(have))
    head = harness.header()
    gpu = f"simulated {shape.device.name} ({shape.name}: {shape.why})" if shape is not None else head.get('gpu')
    say(f"device {device}: {gpu or 'no GPU'}; torch {head['torch']}; budget {format_duration(budget)}; "
        f"model hf:gpt2 " + " ".join(f"{k}={v}" for k, v in model_shape.items()) + f"; results in {folder}")
    results: dict[str, Any] = {"device": device, "budget_s": budget, "study_budget_s": study_budget,
                               "shape": model_shape, "simulated": shape.name if shape is not None else None,
                               "batch": args.batch, "loops": args.loops, "window_s": args.window, "folder": str(folder)}

    def keep() -> None:  # after each part: a run stopped from outside still leaves what it found
        results["wall_s"] = round(time.monotonic() - STARTED, 1)
        try:
            harness.write(args, results, name=name)
        except Exception as exc:  # noqa: BLE001 - never lose the run over its record
            print(f"writing the results failed: {one_line(exc)}", file=sys.stderr, flush=True)

    keep()
    if "study" in parts:
        if left(budget) < 60:
            say("1. the study: skipped: out of time")
            results["study"] = {"skipped": "out of time"}
        else:
            try:
                results["study"] = (simulated_study_part(shape, study_budget, args.trials, folder, url, args.seed)
                                    if shape is not None else
                                    study_part(device, model_shape, study_budget, args.trials, folder, url, budget))
            except Exception as exc:  # noqa: BLE001
                say(f"1. the study: FAIL {one_line(exc)}")
                results["study"] = {"error": one_line(exc)}
        keep()
    rec: Path | None = None
    if "export" in parts:
        if left(budget) < 20:
            say("2. the export: skipped: out of time")
            results["export"] = {"skipped": "out of time"}
        else:
            try:
                results["export"] = export_part(folder, url)
            except Exception as exc:  # noqa: BLE001
                say(f"2. the export: FAIL {one_line(exc)}")
                results["export"] = {"error": one_line(exc)}
            if results["export"].get("path"):
                rec = Path(results["export"]["path"])
        keep()
    elif (folder / "rec.json").exists():
        rec = folder / "rec.json"
    if "loop" in parts:
        if left(budget) < RESERVE_S + d["min_window"] + 10:
            say("3. the plain loop: skipped: out of time")
            results["loop"] = {"skipped": "out of time"}
        else:
            try:
                results["loop"] = (simulated_loop_part(shape, rec, args, args.seed) if shape is not None else
                                   loop_part(device, model_shape, rec, args, folder, budget, cpu_bf16))
            except Exception as exc:  # noqa: BLE001
                say(f"3. the plain loop: FAIL {one_line(exc)}")
                results["loop"] = {"error": one_line(exc)}
        keep()
    try:
        results["summary"] = summary(results)
    except Exception as exc:  # noqa: BLE001
        say(f"4. summary: FAIL {one_line(exc)}")
    say(f"done in {time.monotonic() - STARTED:.0f} s")
    if shape is not None:
        say(simulated_line(results, shape.device.name))
    keep()
    return 0


if __name__ == "__main__":
    sys.exit(main())

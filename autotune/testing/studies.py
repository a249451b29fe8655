"""Made-up autotune studies of known content, written through Optuna into real storage: what the test suite and the
read benchmarks view, draw and time (as ``optuna.testing`` serves Optuna's own tests). Nothing in the product imports
it.

``make_study`` records trials exactly as docs/storage.md says autotune does: the two
objectives and the ``failed`` and ``memory`` constraints through Optuna, the study's
description, the trials' marks and the re-measurements through the store's writers
(:mod:`autotune.store.records`, so no test names a stored key), with figures from a small made-up performance model
of a CNN on a 2-core CPU instead of real measurements: trial 0 is the baseline
(PyTorch defaults), trial 1 the recipe (every trick on), then search trials,
a few failures (oom, nan, error, interrupted) and one duplicate answered from
the cache. ``add_race`` adds a noise floor and a race, ``add_sessions`` the sessions that ran it;
``jittered_copies`` makes more trials from a study's own and ``grow`` adds them in one write
(:func:`autotune.store.writing.add_trials`), past what the made-up model makes alone. The same seed
gives the same study.
"""

from __future__ import annotations

import math
import random
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.trial import TrialState

from autotune import knobs
from autotune.result import Outcome
from autotune.store import StoredStudy, StoredTrial
from autotune.store import writing
from autotune.store.plans import RaceRecord, RaceStop, RoundId
from autotune.store.records import Role
from autotune.testing.fake import made_up_energy

MiB = 1024**2
GiB = 1024**3

#: The searched knobs, as ``space.search`` stores them.
SEARCH: dict[str, dict[str, Any]] = {
    "precision": {"choices": ["fp32", "bf16"]},
    "compile": {"choices": ["off", "default"]},
    "memory_format": {"choices": ["contiguous", "channels_last"]},
    "batch_size": {"low": 16, "high": 256, "step": 16},
    "num_workers": {"choices": [0, 1, 2]},
    "persistent_workers": {"choices": [False, True]},
    "activation_checkpointing": {"choices": [False, True]},
    "optimizer_impl": {"choices": ["default", "foreach", "fused"]},
    "threads": {"choices": [1, 2]},
}
#: The search as the study stores it: search_spaces/cpu.toml's threads, of which a 2-CPU machine searches 1 and 2.
STORED_SEARCH: dict[str, dict[str, Any]] = {**SEARCH, "threads": {"choices": [1, 2, 4, 8, 16]}}
FIXED: dict[str, Any] = {}
CONTEXT = knobs.Context(device_type="cpu", task="train", input_rank=4, torch_version=(2, 13), cpu_count=2)
#: Memory at which the made-up device runs out.
CAPACITY = 2 * GiB
RECIPE = {
    "precision": "bf16",
    "compile": "default",
    "memory_format": "channels_last",
    "batch_size": 128,
    "num_workers": 2,
    "persistent_workers": True,
    "activation_checkpointing": False,
    "optimizer_impl": "fused",
    "threads": 2,
}
FAILURE_MESSAGES = {
    Outcome.OOM: ("OutOfMemoryError", "CPU out of memory: tried to allocate 512.00 MiB (2.00 GiB total)"),
    Outcome.NAN: ("FloatingPointError", "loss is nan at step 7"),
    Outcome.ERROR: ("RuntimeError", "mat1 and mat2 shapes cannot be multiplied (32x512 and 256x10)"),
    Outcome.INTERRUPTED: ("KeyboardInterrupt", "trial interrupted (SIGINT)"),
}


def storage_url(path_or_url: str | Path) -> str:
    """A storage URL: given as is when it has a scheme, else a SQLite file path."""
    text = str(path_or_url)
    return text if "://" in text else f"sqlite:///{Path(text).resolve()}"


def distributions() -> dict[str, BaseDistribution]:
    """Optuna distributions of the searched knobs."""
    out: dict[str, BaseDistribution] = {}
    for name, spec in SEARCH.items():
        if "choices" in spec:
            out[name] = CategoricalDistribution(spec["choices"])
        else:
            out[name] = IntDistribution(spec["low"], spec["high"], step=spec.get("step", 1))
    return out


def make_study(
    path_or_url: str | Path | optuna.storages.BaseStorage,
    n_trials: int = 40,
    seed: int = 0,
    name: str = "demo",
    with_failures: bool = True,
    max_memory_bytes: int | None = None,
    speed: Callable[[dict[str, Any]], float] | None = None,
    data_wait_share: float | None = None,
    power: Callable[[dict[str, Any]], float] | None = None,
    objectives: str = "speed,memory",
) -> optuna.Study:
    """Write a fake study of ``n_trials`` trials (baseline and recipe included) and return it.

    ``path_or_url`` is a SQLite file path, any storage URL or a storage object
    (``optuna.storages.InMemoryStorage()`` for speed). The same seed gives
    the same study. With ``with_failures`` (and at least 8 trials) it holds at
    least one oom, nan, error and interrupted trial; it always holds one duplicate
    when there are at least 6 trials. ``max_memory_bytes`` is stored as the
    ``--max-memory`` budget and makes bigger trials infeasible. ``speed`` replaces the
    made-up model's samples/s of a configuration (3% noise is added); ``data_wait_share``
    replaces its share of the step spent waiting for data. ``power(config)``: the made-up watts a configuration draws,
    for a study as if on a GPU with an energy counter (each ok trial records its energy over ``fake.TIMED_S`` of
    windows: ``power x TIMED_S`` joules over ``speed x TIMED_S`` samples); without it each records the CPU's
    "no energy counter: CPU", as a CPU trial does. ``objectives="speed,energy"`` (with ``power``): the trials' second
    value is their joules per sample, as a study made with ``--objectives speed,energy`` stores it.
    """
    rng = random.Random(seed)
    # Trials are asked and told in memory, the way autotune records them, then copied
    # into the target storage in one go: telling 200 trials straight into SQLite costs
    # ~20 s of commits, the copy a few.
    memory = optuna.storages.InMemoryStorage()
    study = optuna.create_study(
        storage=memory,
        study_name=name,
        directions=["maximize", "minimize"],
        sampler=optuna.samplers.RandomSampler(seed=seed),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(["samples_per_s", "joules_per_sample" if objectives == "speed,energy"
                                else "peak_memory_bytes"])
    writing.save(study, **_description(max_memory_bytes))
    if objectives != "speed,memory":
        writing.save(study, objectives=objectives)
    _record_trials(study, n_trials, rng, with_failures, max_memory_bytes, speed, data_wait_share, power,
                   energy_second=objectives == "speed,energy")
    target = path_or_url if isinstance(path_or_url, optuna.storages.BaseStorage) else storage_url(path_or_url)
    optuna.copy_study(from_study_name=name, from_storage=memory, to_storage=target)
    return optuna.load_study(study_name=name, storage=target)


def _record_trials(
    study: optuna.Study,
    n_trials: int,
    rng: random.Random,
    with_failures: bool,
    max_memory_bytes: int | None,
    speed_of: Callable[[dict[str, Any]], float] | None = None,
    data_wait_share: float | None = None,
    power: Callable[[dict[str, Any]], float] | None = None,
    energy_second: bool = False,
) -> None:
    """Ask and tell ``n_trials`` trials the way autotune's study loop records them (``energy_second``: the second
    value is joules per sample)."""
    dists = distributions()
    defaults = knobs.defaults(CONTEXT)
    baseline = {k: defaults[k] for k in SEARCH}
    forced = ({3: Outcome.OOM, 5: Outcome.NAN, 7: Outcome.ERROR, 9: Outcome.INTERRUPTED}
              if with_failures and n_trials >= 8 else {})
    measured: dict[str, tuple[int, dict[str, Any], list[float]]] = {}  # config_key -> (number, attrs, values)
    first_search_ok: dict[str, Any] | None = None
    for index in range(n_trials):
        role = Role.BASELINE if index == 0 else Role.RECIPE if index == 1 else Role.SEARCH
        if role == Role.BASELINE:
            study.enqueue_trial(baseline)
        elif role == Role.RECIPE:
            study.enqueue_trial(RECIPE)
        elif index == 4:
            study.enqueue_trial(first_search_ok or baseline)  # asked again: answered from the cache
        trial = study.ask(dists)
        resolved = knobs.resolve(trial.params, CONTEXT)
        key = resolved.key()
        writing.mark(trial, role=role, config=resolved.config, config_key=key, not_applicable=resolved.not_applicable)

        if key in measured and role == Role.SEARCH:
            number, marks, values = measured[key]
            writing.mark(trial, outcome=marks["outcome"], result=marks["result"], duplicate_of=number, duration_s=0.0)
            _constrain(trial, ok=True, peak=values[1], budget=max_memory_bytes)
            study.tell(trial, values)
            continue

        outcome = forced.get(index, Outcome.OK)
        if outcome == Outcome.OK and role == Role.SEARCH and with_failures and rng.random() < 0.08:
            outcome = rng.choice([Outcome.OOM, Outcome.NAN, Outcome.ERROR])
        speed, peak = _model(resolved.config, rng)
        if speed_of is not None:
            speed = max(speed_of(resolved.config) * rng.gauss(1.0, 0.03), 0.01)
        if outcome == Outcome.OK and peak > CAPACITY:
            outcome = Outcome.OOM
        duration = round(6.0 + 14.0 * rng.random() + (25.0 if resolved.config["compile"] != "off" else 0.0), 2)
        writing.mark(trial, duration_s=duration, outcome=outcome)

        if outcome == Outcome.INTERRUPTED:
            etype, message = FAILURE_MESSAGES[outcome]
            writing.mark(trial, error={"type": etype, "message": message}, result={})
            study.tell(trial, state=TrialState.FAIL)
            continue
        if outcome != Outcome.OK:
            etype, message = FAILURE_MESSAGES[outcome]
            known_peak = {Outcome.OOM: CAPACITY, Outcome.NAN: peak}.get(outcome)
            result = {"peak_memory_bytes": known_peak, "memory": {}, "notes": {}}
            writing.mark(trial, error={"type": etype, "message": message}, result=result)
            _constrain(trial, ok=False, peak=None, budget=max_memory_bytes)
            study.tell(trial, [0.0, float(CAPACITY)])
            continue

        result = _result(resolved.config, speed, peak, duration, rng)
        if data_wait_share is not None:
            result["profile"]["data_wait_share"] = data_wait_share
        result.update(made_up_energy(power(resolved.config) if power is not None else None, result["samples_per_s"]))
        writing.mark(trial, result=result)
        _constrain(trial, ok=True, peak=peak, budget=max_memory_bytes)
        values = [result["samples_per_s"], result["joules_per_sample"] if energy_second else float(peak)]
        study.tell(trial, values)
        measured[key] = (trial.number, {"outcome": Outcome.OK, "result": result}, values)
        if role == Role.SEARCH and first_search_ok is None:
            first_search_ok = dict(trial.params)


def add_failed_trial(
    study: optuna.Study,
    outcome: str = Outcome.ERROR,
    message: str = "boom",
    error_type: str = "RuntimeError",
    config: dict[str, Any] | None = None,
) -> int:
    """Record one more failed search trial (e.g. with a hostile error message); returns its number."""
    trial = study.ask()
    resolved = knobs.resolve(config or {}, CONTEXT)
    writing.mark(trial, role=Role.SEARCH, config=resolved.config, config_key=resolved.key(),
                 not_applicable=resolved.not_applicable, outcome=outcome,
                 error={"type": error_type, "message": message},
                 result={}, duration_s=1.5)
    _constrain(trial, ok=False, peak=None, budget=None)
    study.tell(trial, [0.0, float(CAPACITY)])
    return trial.number


def add_race(
    study: optuna.Study,
    rates: Mapping[int, float],
    rounds: int = 3,
    floor: int = 2,
    spread: float = 0.01,
    wall_s: bool = False,
    seed: int = 0,
) -> None:
    """Record a noise floor and a finished race the way autotune's race does (docs/storage.md).

    The baseline (#0) is measured again ``floor`` times (rounds ``floor-<k>-<id>``), then in
    each of ``rounds`` rounds the baseline and every trial of ``rates`` (trial -> samples/s)
    once more (``race-<id>-<kk>``), each a re-measurement stored as the race stores it
    (:func:`autotune.store.writing.save_measurement`); each rate gets ``spread`` noise. The
    baseline's rate is its own first value unless given. With ``wall_s`` each measurement
    stores its wall time (about its trial's own ``duration_s``), as autotune does since it
    stores it.
    """
    rng = random.Random(seed)
    trials = {t.number: t for t in StoredStudy.of(study).trials}
    base = trials[0]
    speeds = {0: float(base.values[0]), **{int(k): float(v) for k, v in rates.items()}}  # type: ignore[index]
    now = time.time()

    def record(round_id: str, number: int) -> None:
        t = trials[number]
        rate = round(speeds[number] * rng.gauss(1.0, spread), 3)
        wall = round(float(t.duration_s or 0.0) * rng.uniform(0.9, 1.1), 2) if wall_s else None
        writing.save_measurement(study, number, round_id, samples_per_s=rate, outcome=Outcome.OK,
                                 peak_memory_bytes=int(t.values[1]), other_cores=None, wall_s=wall)  # type: ignore[index]

    for k in range(floor):
        record(RoundId.floor(k + 1, f"f{seed:05d}"), 0)
    race_id = f"r{seed:07d}"
    candidates = [n for n in speeds if n != 0]
    for k in range(rounds):
        for number in [0, *candidates]:
            record(RoundId(RoundId.RACE, race_id, k + 1).format(), number)
    measured = sum(1 for t in trials.values() if t.finished and t.duplicate_of is None)
    writing.save_race(study, race_id, RaceRecord(tuple(candidates), measured, rounds, now, done=True,
                                                 stop=RaceStop.ROUNDS,
                                                 stopped=f"budget of {rounds} rounds spent (--confirm)",
                                                 rounds_run=rounds))


# ---------------------------------------------------------------- a study for the tuning loop's tests


#: The fingerprint of the machine the loop's made-up studies were measured on.
MADE_UP_FINGERPRINT = {"device_type": "cpu", "torch": "2"}


def space_of_one() -> Any:
    """A search space of one knob (two precisions): for a study whose space does not matter."""
    from autotune.knobs import space

    return space.parse({"search": {"precision": ["fp32", "bf16"]}}, "one.toml", "one")


def description(space: Any, context: knobs.Context, **over: Any) -> dict[str, Any]:
    """A study's description (what :meth:`autotune.store.Store.create_or_check` compares) for a made-up workload
    (``x:y``) searching ``space`` (an :class:`autotune.knobs.space.Space`) in ``context``; ``over``: fields to
    change."""
    return {"workload": {"model": "x:y"}, "space": space.to_dict(), "space_hash": space.hash(),
            "fingerprint": dict(MADE_UP_FINGERPRINT), "device": "cpu", "context": context.to_dict(),
            "global_batch": None, **over}


def live_study(url: str, name: str, space: Any, context: knobs.Context, *, sampler: Any = "random", seed: int = 0,
               grace_s: float | None = 60, **over: Any) -> Any:
    """A new (or the existing) study of :func:`description` in ``url``, for the tuning loop to write
    (a :class:`autotune.store.LiveStudy`); ``sampler``: a name (seeded with ``seed``) or an Optuna sampler."""
    from autotune.store import LiveStudy, Store
    from autotune.tuning.loop import make_sampler

    made = make_sampler(sampler, seed) if isinstance(sampler, str) else sampler
    study, _ = Store(url).create_or_check(name, description(space, context, **over), made)
    return LiveStudy(study, grace_s=grace_s)


# ---------------------------------------------------------------- internals


def _description(max_memory_bytes: int | None) -> dict[str, Any]:
    """The study's description, by the stored format's field names (:func:`autotune.store.writing.save`)."""
    import torch

    from autotune._version import __version__

    return {
        "version": __version__,
        "workload": {
            "model": "autotune.examples:cnn",
            "data": None,
            "model_args": {"width": 32},
            "input_shape": [3, 64, 64],
            "num_classes": 10,
            "task": "train",
        },
        "space": {"name": "cpu", "path": "search_spaces/cpu.toml", "search": STORED_SEARCH, "fixed": FIXED},
        "space_hash": "3f2a9c1d0b7e",
        "fingerprint": {
            "device_type": "cpu",
            "device_name": "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz",
            "device_count": 1,
            "torch": torch.__version__,
            "cuda": None,
            "driver": None,
            "python": "3.11.7",
            "cpu_model": "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz",
            "cpu_count": 2,
        },
        "device": "cpu",
        "context": CONTEXT.to_dict(),
        "max_memory_bytes": max_memory_bytes,
        "global_batch": None,
        "created_at": "2025-11-22T11:00:00+00:00",
    }


def _constrain(trial: optuna.Trial, ok: bool, peak: float | None, budget: int | None) -> None:
    trial.set_constraint("failed", 0.0 if ok else 1.0)
    trial.set_constraint("memory", (peak - budget) / budget if ok and budget and peak is not None else 0.0)


def _model(config: dict[str, Any], rng: random.Random) -> tuple[float, int]:
    """Made-up samples/s and peak memory of one configuration."""
    bs = config["batch_size"]
    speed = 420.0 * min(bs / 32, 6.0) ** 0.22
    speed *= {"fp32": 1.0, "bf16": 1.35}[config["precision"]]
    speed *= 1.22 if config["compile"] != "off" else 1.0
    speed *= 0.94 if config["memory_format"] == "channels_last" else 1.0
    speed *= {0: 0.82, 1: 0.97, 2: 1.0}[config["num_workers"]]
    speed *= 0.78 if config["activation_checkpointing"] else 1.0
    speed *= {"default": 1.0, "foreach": 1.03, "fused": 1.05}[config["optimizer_impl"]]
    speed *= {1: 0.58, 2: 1.0}[config["threads"]]
    speed *= rng.gauss(1.0, 0.03)
    act = bs * 7.5 * MiB * (0.55 if config["precision"] == "bf16" else 1.0)
    act *= 0.4 if config["activation_checkpointing"] else 1.0
    peak = 260 * MiB + act + (60 * MiB if config["compile"] != "off" else 0) + config["num_workers"] * 70 * MiB
    return max(speed, 1.0), int(peak * rng.gauss(1.0, 0.01))


def _result(config: dict[str, Any], speed: float, peak: int, duration: float, rng: random.Random) -> dict[str, Any]:
    """The ``result`` user attribute of an ok trial, every documented figure filled in."""
    bs = config["batch_size"]
    windows = [round(speed * rng.gauss(1.0, 0.02), 2) for _ in range(5)]
    mean = sum(windows) / len(windows)
    cv = math.sqrt(sum((w - mean) ** 2 for w in windows) / len(windows)) / mean
    flops_per_sample = 3 * 1.2e9
    achieved = flops_per_sample * speed
    data_wait = {0: 0.18, 1: 0.05, 2: 0.02}[config["num_workers"]] * rng.uniform(0.8, 1.2)
    ops = [
        ("aten::convolution_backward", 0.34),
        ("aten::mkldnn_convolution", 0.22),
        ("aten::native_batch_norm", 0.09),
        ("aten::addmm", 0.06),
        ("Optimizer.step#SGD.step", {"default": 0.08, "foreach": 0.05, "fused": 0.03}[config["optimizer_impl"]]),
        ("aten::copy_", 0.04 if config["precision"] == "bf16" else 0.01),
    ]
    step_us = bs / speed * 1e6
    top_ops = [
        {
            "name": op,
            "self_us": round(step_us * share, 1),
            "calls": 10 * (i + 1),
            "share": round(share * rng.uniform(0.9, 1.1), 4),
        }
        for i, (op, share) in enumerate(ops)
    ]
    ttfs = round(0.8 + (22.0 if config["compile"] != "off" else 0.0) * rng.uniform(0.9, 1.1), 2)
    return {
        "samples_per_s": round(speed, 3),
        "samples_per_s_cv": round(cv, 4),
        "window_samples_per_s": windows,
        "step_time_s": round(bs / speed, 5),
        "samples_per_step": bs,
        "peak_memory_bytes": peak,
        "memory": {"rss_peak_bytes": peak, "rss_before_bytes": 180 * MiB},
        "time_to_first_step_s": ttfs,
        "flops_per_sample": flops_per_sample,
        "achieved_flops": achieved,
        "mfu": round(achieved / 1.0e13, 4),  # against a made-up 10 TFLOP/s peak
        "profile": {"top_ops": top_ops, "data_wait_share": round(data_wait, 4), "h2d_copy_us": 0.0},
        "phases_s": {"spawn": 0.4, "build": 1.1, "warmup": ttfs, "measure": round(duration * 0.6, 2)},
        "wall_s": duration,
        "overhead_s": round(duration * 0.15, 2),
        "notes": {},
    }


def jittered_copies(study: optuna.Study, n: int, seed: int = 1, failure_share: float = 0.08) -> list[StoredTrial]:
    """``n`` new trials, numbered after the study's, copied from its ok search trials: samples/s x N(1, 3%), peak
    memory x N(1, 1%), duration x U(0.8, 1.2), and about ``failure_share`` of them turned into oom, nan and error
    failures; read with the study as ``StoredStudy.of(study).with_trials([...])``. A study of 10,000 trials built so
    holds ~9,000 distinct measurements, not a few configurations answered from the cache again and again (the
    10,000-trial dashboard test)."""
    import copy
    import dataclasses

    rng = random.Random(seed)
    stored = StoredStudy.of(study)
    ok = [t for t in stored.trials
          if t.state == "complete" and t.duplicate_of is None and t.role == Role.SEARCH and t.outcome == Outcome.OK]
    copies = []
    for k in range(n):
        src = rng.choice(ok)
        duration = round(float(src.duration_s or 10.0) * rng.uniform(0.8, 1.2), 2)
        if rng.random() < failure_share:
            outcome = rng.choice([Outcome.OOM, Outcome.NAN, Outcome.ERROR])
            etype, message = FAILURE_MESSAGES[outcome]
            changed: dict[str, Any] = dict(
                outcome=outcome, error={"type": etype, "message": message}, values=(0.0, float(CAPACITY)),
                result={"peak_memory_bytes": CAPACITY if outcome == Outcome.OOM else None, "memory": {}, "notes": {}},
                constraints={"failed": 1.0, "memory": 0.0})
        else:
            speed = round(float(src.values[0]) * rng.gauss(1.0, 0.03), 3)  # type: ignore[index]
            peak = int(src.values[1] * rng.gauss(1.0, 0.01))  # type: ignore[index]
            result = {**copy.deepcopy(dict(src.result)), "samples_per_s": speed, "peak_memory_bytes": peak}
            changed = dict(result=result, values=(speed, float(peak)), constraints={"failed": 0.0, "memory": 0.0})
        copies.append(dataclasses.replace(src, number=len(stored.trials) + k, duration_s=duration, **changed))
    return copies


def add_sessions(study: optuna.Study, n: int = 4) -> None:
    """Record ``n`` sessions that ran the study (an hour apart, about 50 minutes each): the time it took."""
    now = time.time()
    for k in range(n):
        writing.save_session(study, f"s{k}", {"started_at": now - 3600 * (k + 1), "elapsed_s": 3000.0 + 10 * k})


def grow(study: optuna.Study, n: int, seed: int = 1) -> None:
    """Add ``n`` jittered copies of the study's own trials (:func:`jittered_copies`) in one write."""
    if n > 0:
        writing.add_trials(study, jittered_copies(study, n, seed), distributions())

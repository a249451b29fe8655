"""How busy the machine was while a study measured, and which measurements that leaves out of a claim.

Each measurement records the cores other processes used meanwhile (:mod:`autotune.machine.load`). A
study measured on a busy machine says so in its verdict, and a measurement taken while the
machine was much busier than during the baseline's is left out of its configuration's claim: a
ratio between a quiet baseline and a busy candidate (or the reverse) is a claim about that minute.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from autotune.store.plans import RoundId
from autotune.evidence.configs import Measured

# rounds of processes that measured several configurations alternately
WITHIN_PREFIXES = (RoundId.prefix(RoundId.PAIR), RoundId.prefix(RoundId.ABLATION))


@dataclass(frozen=True)
class Load:
    """How busy the machine was while the study measured (other processes' cores, :mod:`autotune.machine.load`).

    A measurement is *busy* when other processes used more than :func:`autotune.machine.load.busy_threshold`
    cores; it is *much busier than the baseline's* when they used that much more than during the
    baseline's measurements (their median), and is then left out of its configuration's claim.
    """

    cores: int  # the cores the measuring processes could run on (their share, with run --workers)
    baseline_other: float  # the median of other processes' cores during the baseline's measurements
    measurements: int  # measurements whose load is known
    busy: int  # of them, taken on a busy machine
    max_other: float
    median_other: float
    left_out: int = 0
    machine_cores: int = 0  # the machine's (0: not known); more than ``cores``: the figures hold for such a share

    @classmethod
    def of(cls, configs: Iterable[Measured], baseline: Measured | None, fingerprint: Mapping[str, Any]) -> Load:
        from autotune.machine.load import busy_threshold

        configs = list(configs)
        machine = int(fingerprint.get("cpu_count") or 0)
        slices = [n for c in configs for n in c.slices.values()]
        cores = int(statistics.median(slices)) if slices else machine or 1
        every = [v for c in configs for v in c.loads.values()]
        base = [v for v in baseline.loads.values()] if baseline else []
        threshold = busy_threshold(cores)
        probe = cls(cores, statistics.median(base) if base else 0.0, len(every), sum(1 for v in every if v > threshold),
                    max(every, default=0.0), statistics.median(every) if every else 0.0, 0, machine)
        left = sum(1 for c in configs for v in c.loads.values() if probe.much_busier(v))
        return cls(**{**probe.__dict__, "left_out": left})

    @property
    def share(self) -> str | None:
        """Where the measuring processes had a share of the machine's cores: what the figures hold for."""
        if self.machine_cores and self.cores < self.machine_cores:
            return (f"measured on {self.cores} of the machine's {self.machine_cores} CPUs: the figures hold for such a "
                    "share")
        return None

    @property
    def threshold(self) -> float:
        from autotune.machine.load import busy_threshold

        return busy_threshold(self.cores)

    def much_busier(self, other: float) -> bool:
        return other > self.baseline_other + self.threshold

    @property
    def was_busy(self) -> bool:
        return self.busy > 0

    def text(self) -> str:
        if not self.measurements:
            return "machine load: not recorded"
        if not self.was_busy:
            return (f"machine quiet while measuring: other processes used at most {self.max_other:.1f} of "
                    f"{self.cores} cores")
        text = (f"measured on a busy machine: other processes used up to {self.max_other:.1f} of {self.cores} cores "
                f"during {self.busy} of {self.measurements} measurements (median {self.median_other:.1f})")
        if self.left_out:
            text += (f"; {self.left_out} taken while it was much busier than during the baseline's were left out of "
                     "the claims")
        return text

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "busy_machine": self.was_busy, "text": self.text(), "share": self.share}


def leave_out(configs: Iterable[Measured], load: Load) -> None:
    """Set each configuration's rounds left out of its claim: those much busier than the baseline's, unless the
    baseline was measured alongside (a process that measured both cancels what the load did to each)."""
    for c in configs:
        c.left_out = frozenset(r for r, other in c.loads.items() if load.much_busier(other)
                               and not r.startswith(WITHIN_PREFIXES))

"""What a study claims: every figure any view shows, computed in one place from all its measurements.

A configuration's *figure* (samples/s), the processes behind it, its *speed-up* over the
baseline with a 90% interval, the study's *noise floor*, the Pareto *front* and the final
*verdict* all come from :class:`Evidence`, pure computation over the stored study
(:class:`autotune.store.StoredStudy`: its typed trials and its records; ``study.evidence``
builds it once). The run's summary and table, ``status`` (and ``--json``), ``list``,
``export``, warm start and the dashboard read them from here and nowhere else, so one
configuration never shows two speed-ups.

- :mod:`.reads`: what the figures read of a study (the store's view, declared as protocols);
- :mod:`.configs`: each measured configuration with every measurement of it, and its claim;
- :mod:`.load`: how busy the machine was, and what that leaves out of a claim;
- :mod:`.figures`: :class:`Evidence`: the comparisons, the front, the race's candidates and the verdict;
- :mod:`.verdict`: :class:`Verdict`, the answer a user reads.
"""

from __future__ import annotations

from autotune.evidence.configs import Config
from autotune.evidence.figures import Evidence
from autotune.evidence.load import WITHIN_PREFIXES, Load
from autotune.evidence.verdict import Verdict

__all__ = ["Config", "Evidence", "Load", "Verdict", "WITHIN_PREFIXES"]

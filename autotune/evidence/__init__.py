"""What a study claims: every figure any view shows, computed in one place from all its measurements.

A configuration's *figure* (samples/s), the processes behind it, its *speed-up* over the
baseline with a 90% interval, the study's *noise floor*, the Pareto *front* and the final
*verdict* all come from :class:`Evidence`, pure computation over the stored study
(:class:`autotune.store.StoredStudy`: its typed trials and its records; :func:`evidence_of`
builds it once per study read). The run's summary and table, ``status`` (and ``--json``), ``list``,
``export``, warm start and the dashboard read them from here and nowhere else, so one
configuration never shows two speed-ups.

- :mod:`.configs`: each measured configuration (:class:`Measured`) with every measurement of it, and its claim;
- :mod:`.stats`: the statistics every figure rests on: noise, paired ratios, intervals adjusted for comparisons and
  looks;
- :mod:`.busy`: how busy the machine was, and what that leaves out of a claim;
- :mod:`.bought`: what each knob of a winner bought, read from the path's measurements;
- :mod:`.figures`: :class:`Evidence`: the figures a view shows: the rows, the front and the verdict; built on
  :mod:`.comparing` (the measurements read once, each configuration compared with another) and :mod:`.choices`
  (what the tuning job's phases choose: the race's candidates, its choice, the path of what each knob bought);
- :mod:`.verdict`: :class:`Verdict`, the answer a user reads;
- :mod:`.ceiling`: the batch ceiling a study stored, in words.
"""

from __future__ import annotations

import weakref

from autotune.evidence.configs import Measured
from autotune.evidence.figures import Evidence
from autotune.evidence.busy import WITHIN_PREFIXES, Load
from autotune.evidence.verdict import Verdict
from autotune.store.records import StoredStudy

_BUILT: weakref.WeakKeyDictionary[StoredStudy, Evidence] = weakref.WeakKeyDictionary()


def evidence_of(study: StoredStudy) -> Evidence:
    """The evidence of a study as read (at the study's own memory budget), built once per read and then kept as
    long as the read is: every view of one read shows the same figures, and none computes them twice."""
    built = _BUILT.get(study)
    if built is None:
        built = _BUILT[study] = Evidence(study)
    return built


__all__ = ["Evidence", "Load", "Measured", "Verdict", "WITHIN_PREFIXES", "evidence_of"]

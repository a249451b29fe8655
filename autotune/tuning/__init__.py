"""A tuning job, composed: preparing a study, the loop and its phases, the fleet.

:mod:`.preparation` prepares a study in steps, in order (look, probe, fit the space, the batch ceiling, open the
study, recover stale trials, warm start, the loop); :mod:`.loop` runs the phases (:mod:`.phases`: search, noise
floor, race, what each knob bought, minimal); :mod:`.ceiling_probe` probes the largest batch that fits;
:mod:`.warmstart` seeds a new study with earlier studies' winners; :mod:`.fleet` runs workers (``run --workers``,
``--devices``, ``autotune worker``) over a shared storage; :mod:`.progress` prints what a run does. Trials run
through :mod:`autotune.trial`; the figures come from :mod:`autotune.evidence`; the record is :mod:`autotune.store`.
"""

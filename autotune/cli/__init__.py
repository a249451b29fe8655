"""The ``autotune`` command line: a thin layer over the other modules, one module per group of commands.

- :mod:`autotune.cli.edge`: the group every command belongs to; typed errors become one line there, and only there.
- :mod:`autotune.cli.options`: the options that are fields of the request, made from its declaration
  (:mod:`autotune.request`), and their translation into it.
- :mod:`autotune.cli.measuring`: ``knobs`` and ``measure``.
- :mod:`autotune.cli.jobs`: ``run``, ``submit`` and ``worker``.
- :mod:`autotune.cli.reads`: ``list``, ``status``, ``trials``, ``export`` and ``dashboard``.
- :mod:`autotune.cli.verifying`: ``verify``.

``autotune.cli:main`` is the console script; ``python -m autotune.cli`` runs it too.
"""

from __future__ import annotations

from autotune.cli.edge import AutotuneGroup, main, open_store, study_store
from autotune.cli.jobs import run, submit, worker
from autotune.cli.measuring import knobs_cmd, measure, result_lines
from autotune.cli.options import DURATION, SIZE, job_from, make_spec, resolve_device, storage_option, workload_from
from autotune.cli.reads import RECOMMENDED_MARK, dashboard, export, front_rows, list_cmd, status, trials_cmd
from autotune.cli.verifying import verify

for _command in (knobs_cmd, measure, run, worker, submit, list_cmd, status, trials_cmd, export, dashboard, verify):
    main.add_command(_command)

__all__ = ["AutotuneGroup", "DURATION", "RECOMMENDED_MARK", "SIZE", "dashboard", "export", "front_rows", "job_from",
           "knobs_cmd", "list_cmd", "main", "make_spec", "measure", "open_store", "resolve_device", "result_lines",
           "run", "status", "storage_option", "study_store", "submit", "trials_cmd", "verify", "worker",
           "workload_from"]

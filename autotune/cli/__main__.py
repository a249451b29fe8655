"""``python -m autotune.cli``: the command line, as the ``autotune`` script runs it (workers are started so)."""

from autotune.cli import main

main()

"""The callbacks an exported framework snippet names (``autotune.callbacks.for_trainer``): those of
:mod:`autotune.export.callbacks`."""

from autotune.export.callbacks import *  # noqa: F401,F403 - the public face of the framework callbacks
from autotune.export.callbacks import __all__, __getattr__  # noqa: F401 - the Trainer's and Lightning's classes, lazily

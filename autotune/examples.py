"""The built-in examples by the name a model spec gives them (``--model autotune.examples:cnn``): the
workloads of :mod:`autotune.workloads.examples`."""

from autotune.workloads.examples import *  # noqa: F401,F403 - the public face of the built-in examples
from autotune.workloads.examples import __all__  # noqa: F401

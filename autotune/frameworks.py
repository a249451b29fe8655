"""A configuration rendered for a framework (``autotune.frameworks.render(doc, "hf-trainer")``): the functions of
:mod:`autotune.export.frameworks`."""

from autotune.export.frameworks import *  # noqa: F401,F403 - the public face of the framework exports
from autotune.export.frameworks import __all__  # noqa: F401

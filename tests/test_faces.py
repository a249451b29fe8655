"""The public names users import stay where they import them: the package's faces hand on the rooms' own objects."""

from __future__ import annotations

import autotune
import autotune.callbacks
import autotune.examples
import autotune.frameworks
from autotune.export import callbacks, frameworks
from autotune.workloads import examples


def test_the_faces_hand_on_the_rooms_objects():
    assert autotune.examples.cnn is examples.cnn and autotune.examples.SmallResNet is examples.SmallResNet
    assert autotune.frameworks.render is frameworks.render and autotune.frameworks.FORMATS == frameworks.FORMATS
    assert autotune.callbacks.for_trainer is callbacks.for_trainer
    assert set(autotune.examples.__all__) == set(examples.__all__)


def test_a_built_in_example_goes_by_its_public_spec():
    """``--model autotune.examples:cnn`` and ``tune(autotune.examples.cnn)`` name the same module."""
    from autotune.workloads import shipping

    assert shipping.reference(autotune.examples.cnn) == "autotune.examples:cnn"


def test_the_package_face_names_its_public_api():
    assert set(autotune.__all__) == {"TuneResult", "Workload", "load_config", "measure", "tune", "verify",
                                     "__version__"}
    from autotune._version import __version__

    assert autotune.__version__ == __version__

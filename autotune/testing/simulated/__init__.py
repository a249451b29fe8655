"""A simulated GPU on which a whole study runs unchanged, in simulated time: the GPU study proven before a GPU is lent.

A GPU machine comes to this project rarely and for minutes; a study's time budget, compile limits and claims under a
GPU's noise are what goes wrong there. :mod:`.device` is the device and its workloads, of known truth, shaped by
what the GPU runs measured; :mod:`.runner` answers as the trial runner does, advancing a simulated clock by what each
process costs; :mod:`.study` runs the product's own preparation and loop against it (:func:`run_study`) and says what
was reachable. ``benchmarks/simulated_studies.py`` holds 200 such studies to the properties a GPU study must keep, and
``benchmarks/gpu_study.py --simulate`` runs the GPU proof on it. Nothing in the product imports it.
"""

from autotune.testing.simulated.device import SHAPES, Device, Shape, Workload
from autotune.testing.simulated.runner import SimulatedClock, SimulatedRunner
from autotune.testing.simulated.study import SimulatedStudy, best_reachable, run_study

__all__ = ["SHAPES", "Device", "Shape", "SimulatedClock", "SimulatedRunner", "SimulatedStudy", "Workload",
           "best_reachable", "run_study"]

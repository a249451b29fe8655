"""One trial: a configuration measured in a process of its own. This room imports torch.

The parent's side: :mod:`.runner` (a request with its timeout and limits, every ending typed), :mod:`.forkserver`
(the warm interpreter every trial process is forked from; it never starts CUDA), :mod:`.messages` (what crosses
the boundary: typed requests and answers).

Inside the trial process: :mod:`.child` (its entry: answers one request), :mod:`.measure_one` (one configuration
measured), :mod:`.paired` (several measured alternately in one process), :mod:`.arm` (one configuration built and
ready to step), :mod:`.protocol` (how a trial measures: warm-up, windows, memory, profile, FLOPs) and :mod:`.plan`
(the one place knob values become PyTorch calls, also what ``load_config(...).apply`` runs in a user's script).
"""

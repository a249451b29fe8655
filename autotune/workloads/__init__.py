"""What is measured: :mod:`.contract` (:class:`autotune.Workload`, what a model factory may return, and the defaults
around it: loss, optimizer, synthetic data), :mod:`.specs` (where a spec leads: ``module:attr``, ``hf:``, a pickled
object), :mod:`.hf` (Hugging Face models built offline from their config), :mod:`.shipping` (a factory defined in a
notebook, pickled to the trial processes) and :mod:`.examples` (the built-in examples, also ``autotune.examples``).
"""

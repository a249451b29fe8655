"""What the tests and the benchmarks share, and the product never imports: :mod:`.studies` (made-up studies of known
content, and studies for the tuning loop's tests), :mod:`.fake` (the one fake measurement of known truth: the noise,
drift and order effects real machines show, a runner without processes), :mod:`.graphs` (CUDA graphs' replayed
outputs, on a CPU) and :mod:`.suite` (a test that cannot run here, a wait on a condition, CI's PostgreSQL).
"""

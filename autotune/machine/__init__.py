"""The machine a trial runs on: :mod:`.hardware` (the device, the fingerprint and peak FLOP/s, probed with torch where
trials run; who else holds a GPU), :mod:`.identity` (what makes two fingerprints' measurements comparable), :mod:`.load`
(what other processes use of this process's cores), :mod:`.heap` (glibc malloc's options), :mod:`.preload` (an
allocator library to preload: where it is installed, whether a process has it loaded) and :mod:`.binding` (the cores
to bind a process to, and where its threads may run). Only :mod:`.hardware` imports torch, inside the functions that
probe.
"""

"""The machine a trial runs on: :mod:`.hardware` (the device, the fingerprint and peak FLOP/s, probed with torch where
trials run; who else holds a GPU), :mod:`.identity` (what makes two fingerprints' measurements comparable), :mod:`.load`
(what other processes use of this process's cores) and :mod:`.heap` (glibc malloc's options). Only :mod:`.hardware`
imports torch, inside the functions that probe.
"""

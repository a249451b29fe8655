"""The answer leaves the study: :mod:`.document` (the exported JSON document: the pick, its claim, where it was
measured; torch-free), :mod:`.frameworks` (that document as Hugging Face Trainer, Lightning or Accelerate arguments;
torch-free), :mod:`.config` (``load_config`` and ``apply``: the configuration in a user's own script, through
:mod:`autotune.trial.plan`), :mod:`.callbacks` (what a framework's arguments cannot say, applied in its own loop) and
:mod:`.verify` (does the claim still hold on this machine?).
"""

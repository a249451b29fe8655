# %% [markdown]
# # Tune a Hugging Face model from Python
#
# `autotune.tune()` is `autotune run` as a function: it searches the performance knobs
# (precision, torch.compile, batch size, DataLoader workers, fused optimizers, ...) of a
# model's training step, each trial an isolated, profiled measurement, and returns the
# study, its Pareto front and a verdict: which configuration to use, by how much, and how
# sure. Run it as a script or cell by cell (a `# %%` cell opens in VS Code, PyCharm and
# Jupytext).
#
# The model here is `hf:gpt2` built offline from its configuration (random weights: speed
# and memory depend on the shapes, not on the weights), shrunk so that a trial is short on
# a CPU. For a real study, drop the tiny sizes and `quick`, and give it
# `trials=30` or a `time_budget="2h"`.
#
# Settings: where the study and the export go, `python tune_hf_model.py FOLDER` or the
# `AUTOTUNE_EXAMPLE_DIR` variable (default: a new temporary folder), and
# `AUTOTUNE_EXAMPLE_TRIALS` (default 3).

# %%
import os
import sys
import tempfile
from pathlib import Path

import autotune

# a notebook's argv is the kernel's
given = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else None
out = Path(given or os.environ.get("AUTOTUNE_EXAMPLE_DIR") or tempfile.mkdtemp(prefix="autotune-example-"))
out.mkdir(parents=True, exist_ok=True)
trials = int(os.environ.get("AUTOTUNE_EXAMPLE_TRIALS", "3"))

# %% [markdown]
# ## Tune
#
# `model_args` override the model's configuration (`n_layer`, `n_embd`, ...); `seq_len` is
# the tokens per synthetic sample. The study lives in a SQLite file: calling `tune()` again
# with the same `study` and `storage` resumes it (a higher `trials` adds trials).

# %%
result = autotune.tune(
    "hf:gpt2",
    model_args={"n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 128, "seq_len": 16},
    trials=trials,
    quick=True,  # short measurement windows: a smoke run, noisier figures
    confirm=1,  # one round of the final race (the leaders against the defaults, measured again)
    storage=f"sqlite:///{out / 'gpt2-tiny.db'}",
    study="gpt2-tiny",
)
result

# %% [markdown]
# ## Read the result
#
# `result.verdict` is the answer (its `.text` says it in words), `result.front` the Pareto
# front of throughput against peak memory, `result.speedup` the winner's speed-up over
# PyTorch's defaults with its 90% interval.

# %%
print(f"verdict: {result.verdict.text}")
for row in result.front:
    speed = row["speedup"]["text"] if row["speedup"] else "-"
    print(f"  #{row['trial']}: {row['samples_per_s']:.0f} samples/s, {row['peak_memory_bytes'] / 2**20:.0f} MiB, "
          f"{speed}, {row['changes'] or 'defaults'}")

# %% [markdown]
# ## Export for the Hugging Face Trainer
#
# `export(format="hf-trainer")` writes the `TrainingArguments` of the chosen configuration
# (what the Trainer cannot express is listed in the file, to do by hand). It exports the
# recommendation: when nothing beats the defaults beyond the noise, as is likely in a run this
# short, that is the defaults, and the file says so with the verdict (`pick="fastest"` exports the
# fastest-looking one instead, labelled as such). `format="json"` writes what
# `autotune.load_config()` applies in your own training loop.

# %%
path = out / "training_args.py"
result.export(path, format="hf-trainer")
print(f"export: {path}")
print(path.read_text())

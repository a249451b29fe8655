"""The examples under docs/examples run as documented (each in a fresh interpreter, with a small budget)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples"


@pytest.mark.slow  # about a minute on a 2-core CPU: each trial process imports transformers
def test_tune_hf_model_example(tmp_path):
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed (pip install -e '.[hf]'): docs/examples/tune_hf_model.py tunes "
                    "hf:gpt2")
    env = {**os.environ, "AUTOTUNE_EXAMPLE_TRIALS": "3",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, str(EXAMPLES / "tune_hf_model.py"), str(tmp_path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "new study 'gpt2-tiny'" in out and "\nverdict: " in out
    export = tmp_path / "training_args.py"
    assert f"export: {export}" in out
    text = export.read_text()
    assert "TrainingArguments(" in text and "'per_device_train_batch_size':" in text  # the keyword form
    compile(text, str(export), "exec")  # the export is Python
    assert (tmp_path / "gpt2-tiny.db").exists() and not (tmp_path / "studies").exists()

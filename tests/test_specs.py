"""Where a spec leads (autotune.workloads.specs): every way a module:attr spec can be wrong is one line, and hf: specs
reach autotune.workloads.hf."""

from __future__ import annotations

import pytest

from autotune.workloads import hf
from autotune.errors import SpecError
from autotune.workloads.specs import import_spec


def test_spec_without_colon():
    with pytest.raises(SpecError, match="expected module:attribute"):
        import_spec("autotune.examples.cnn")


def test_missing_module_and_attribute():
    with pytest.raises(SpecError, match="no module named 'surely_missing_pkg'"):
        import_spec("surely_missing_pkg.models:net")
    with pytest.raises(SpecError, match="has no attribute 'nope'"):
        import_spec("autotune.examples:nope")


def test_import_error_inside_user_module_shows_users_error(user_module):
    name = user_module("import surely_missing_dependency_xyz\n")
    with pytest.raises(SpecError) as info:
        import_spec(f"{name}:net")
    msg = str(info.value)
    assert "surely_missing_dependency_xyz" in msg and "importing" in msg and f"{name}.py:1" in msg
    name = user_module("raise ValueError('bad config in user code')\n")
    with pytest.raises(SpecError, match="ValueError: bad config in user code"):
        import_spec(f"{name}:net")


def test_hf_factory_is_reached_through_import_spec(monkeypatch):
    seen = []
    monkeypatch.setattr(hf, "factory", lambda s: seen.append(s) or (lambda **kw: None))
    import_spec("hf:llama")
    assert seen == ["hf:llama"]
    with pytest.raises(SpecError, match="no module named 'hf'"):
        import_spec("hf:gpt2", "--data")  # only --model names Hugging Face models

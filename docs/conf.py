"""Sphinx configuration of autotune's documentation site (``sphinx-build -W docs docs/_build/html``)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

from autotune import __version__  # noqa: E402

project = "autotune"
author = "the autotune authors"
copyright = "2026, the autotune authors"  # noqa: A001 - Sphinx's name
release = version = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx_click",
    "autotune_docs",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
exclude_patterns = ["_build", "examples", "README.md"]
html_theme = "furo"
html_title = f"autotune {release}"
html_static_path = ["_static"]
html_css_files = ["autotune.css"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False}

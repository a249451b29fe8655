"""The site's own directives, tables generated when the site is built so that the pages cannot drift:

- ``knob-table``: the knob registry (:mod:`autotune.knobs.registry`, the single source of truth for a knob's values,
  where it applies and how it is applied; ``autotune knobs`` prints the same);
- ``layers``: the package's rooms in the order of the layers contracts in ``pyproject.toml`` (which
  ``tests/test_layers.py`` runs), each with the first sentence of its own docstring.
"""

from __future__ import annotations

import ast
import re
import importlib.util
import tomllib
from pathlib import Path

from docutils import nodes
from sphinx.util.docutils import SphinxDirective


INLINE = re.compile(r":[\w:]+:`~?([^`]+)`|``([^`]+)``")


def inline(text: str) -> list[nodes.Node]:
    """Plain text with its ``code`` and :role:`target` spans as literals (the cells are built as nodes, not parsed:
    a MyST page would parse reStructuredText as Markdown)."""
    out: list[nodes.Node] = []
    text = " ".join(str(text).split()) or "-"
    at = 0
    for match in INLINE.finditer(text):
        if match.start() > at:
            out.append(nodes.Text(text[at:match.start()]))
        out.append(nodes.literal(text=match.group(1) or match.group(2)))
        at = match.end()
    if at < len(text):
        out.append(nodes.Text(text[at:]))
    return out


def table(header: list[str], rows: list[list[str]], classes: list[str], widths: list[int] | None = None) -> nodes.table:
    """A docutils table of plain cells (see :func:`inline`)."""
    widths = widths or [1] * len(header)
    group = nodes.tgroup(cols=len(header))
    group += [nodes.colspec(colwidth=w) for w in widths]

    def row(cells: list[str]) -> nodes.row:
        r = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            entry += nodes.paragraph("", "", *inline(cell))
            r += entry
        return r

    head = nodes.thead()
    head += row(header)
    body = nodes.tbody()
    body += [row(cells) for cells in rows]
    group += [head, body]
    out = nodes.table(classes=classes)
    out += group
    return out


def knob_rows() -> list[list[str]]:
    """One row per knob of the registry, in its order: name, values, PyTorch's default, where it applies, how it is
    applied, what it does, and what to write by hand for the tuning guides' value."""
    from autotune import knobs

    rows = []
    for k in knobs.REGISTRY:
        by_hand = k.how(k.recipe) if (k.how is not None and k.recipe is not None) else ""
        rows.append([f"``{k.name}``", k.values_text(), k.torch_default or k.format(k.default_for()), k.applies_text(),
                     knobs.STAGE_HELP[k.stage], k.help, by_hand])
    return rows


class KnobTable(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        header = ["knob", "values", "PyTorch's default", "applies", "applied as", "what it does",
                  "by hand (the guides' value)"]
        return [table(header, knob_rows(), ["knob-table"], [3, 4, 3, 3, 3, 6, 6])]


ROOT = Path(__file__).resolve().parents[2]


def first_sentence(module: str) -> str:
    """The first sentence of a module's docstring, read from its source (importing ``__main__`` would run it)."""
    origin = importlib.util.find_spec(module).origin
    doc = (ast.get_docstring(ast.parse(Path(origin).read_text(encoding="utf-8"))) or "").strip()
    text = " ".join(doc.split("\n\n", 1)[0].split())
    end = text.find(". ")
    return (text if end < 0 else text[: end + 1]).replace("|", "/")


def layer_rows() -> list[tuple[str, list[list[str]]]]:
    """(contract name, rows of [layer number, module, its first sentence]) for each layers contract, in order."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    out = []
    for contract in config["tool"]["importlinter"]["contracts"]:
        if contract.get("type") != "layers":
            continue
        container = contract["containers"][0]
        rows = []
        for i, layer in enumerate(contract["layers"], start=1):
            for room in (r.strip() for r in layer.split("|")):
                rows.append([str(i), f"``{container}.{room}``", first_sentence(f"{container}.{room}")])
        out.append((contract["name"], rows))
    return out


class Layers(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        out: list[nodes.Node] = []
        for name, rows in layer_rows():
            out.append(nodes.rubric(text=name))
            out.append(table(["layer", "module", "what it is for (its docstring)"], rows, ["layers-table"], [1, 4, 12]))
        return out


def setup(app):  # noqa: ANN001, ANN201 - Sphinx's extension entry point
    app.add_directive("knob-table", KnobTable)
    app.add_directive("layers", Layers)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}

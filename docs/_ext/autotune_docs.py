"""The site's own directives, tables generated when the site is built so that the pages cannot drift:

- ``knob-table``: the knob registry (:mod:`autotune.knobs.registry`, the single source of truth for a knob's values,
  where it applies and how it is applied; ``autotune knobs`` prints the same);
- ``layers``: the package's rooms in the order of the layers contracts in ``pyproject.toml`` (which
  ``tests/test_layers.py`` runs), each with the first sentence of its own docstring.

The knob table is also written into ``docs/knobs.md`` as Markdown, between :data:`BEGIN` and :data:`END`, so that the
page reads on GitHub too: ``python docs/_ext/autotune_docs.py`` writes it again, ``tests/test_docs.py`` holds it equal
to the registry, and the site replaces it with the directive when it reads the page (:func:`site_source`).
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


KNOBS_PAGE = ROOT / "docs" / "knobs.md"
BEGIN = "<!-- the knob table, written from the registry by `python docs/_ext/autotune_docs.py`: do not edit by hand -->"
END = "<!-- end of the knob table -->"
KNOB_HEADER = ["knob", "values", "PyTorch's default", "applies", "applied as", "what it does",
               "by hand (the guides' value)"]


def markdown_cell(text: str) -> str:
    """A cell as Markdown: ``code`` and :role:`target` spans as code, the rest as text, pipes escaped."""
    text = " ".join(str(text).split()) or "-"
    text = INLINE.sub(lambda m: "`" + (m.group(1) or m.group(2)) + "`", text)
    return text.replace("|", "\\|")


def knob_markdown() -> str:
    """The knob table as a Markdown table (what :class:`KnobTable` draws on the site)."""
    rows = [KNOB_HEADER, ["---"] * len(KNOB_HEADER), *knob_rows()]
    return "\n".join("| " + " | ".join(markdown_cell(c) if i != 1 else c for c in row) + " |"
                     for i, row in enumerate(rows))


def written_table(text: str) -> str | None:
    """The knob table a page holds between :data:`BEGIN` and :data:`END` (None: no such region)."""
    if BEGIN not in text or END not in text:
        return None
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip()


def write_knob_table(path: Path = KNOBS_PAGE) -> bool:
    """Write the registry's knob table into the page's region; whether the page changed."""
    text = path.read_text(encoding="utf-8")
    if written_table(text) is None:
        raise SystemExit(f"{path}: no region between {BEGIN!r} and {END!r}")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    new = f"{head}{BEGIN}\n\n{knob_markdown()}\n\n{END}{tail}"
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


def site_source(app, docname: str, source: list[str]) -> None:  # noqa: ANN001 - Sphinx's event
    """On the site, the page's Markdown copy of the knob table gives way to the table built from the registry."""
    text = source[0]
    if written_table(text) is not None:
        head, rest = text.split(BEGIN, 1)
        source[0] = head + "```{knob-table}\n```" + rest.split(END, 1)[1]


def setup(app):  # noqa: ANN001, ANN201 - Sphinx's extension entry point
    app.add_directive("knob-table", KnobTable)
    app.add_directive("layers", Layers)
    app.connect("source-read", site_source)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(ROOT))
    print(f"{KNOBS_PAGE.relative_to(ROOT)}: " + ("the knob table written again" if write_knob_table()
                                                 else "the knob table is the registry's already"))

"""The documentation: a README a newcomer reads in five minutes, and a site built from docs/ that cannot drift.

- The site builds with the README's own command, warnings as errors (a broken reference, a malformed docstring of
  the API reference, a page left out of the table of contents fails), and its reference is complete: every public
  name of ``autotune`` (``__all__``), every command, every knob (the knob page's table is generated from the
  registry) and every room of the layers contracts.
- Nothing cites a file the repository does not hold, and every figure on the results and history pages names the
  file that printed it and that file's date; the output a page quotes (the README's run, the GPU page's study, the
  front page's) is in the results file it cites, line for line, and the README's words about it (its processes, its
  time, its verdict) are that file's.
- The knob table is written into docs/knobs.md too (GitHub shows the Markdown, not the site), and held equal to the
  registry; every glossary link points to a term the glossary defines; user pages carry no development words
  (issue numbers, commit hashes, developers' variables and internal names), which the architecture and contributing
  pages may.

The build needs the ``docs`` extra (Sphinx, furo, myst-parser, sphinx-click; the ``test`` extra brings it): without
it the build test skips, saying why, and fails in CI (autotune.testing.suite.need).
"""

from __future__ import annotations

import glob
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import autotune
from autotune import knobs
from autotune.cli import main
from autotune.testing.suite import need

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
RESULTS_PAGE = DOCS / "results.md"
HISTORY_PAGE = DOCS / "history.md"
GLOSSARY = DOCS / "glossary.md"
#: Pages for contributors, which may name the package's internals.
CONTRIBUTORS = ("architecture.md", "contributing.md")
README_RUN = "readme_run-"  # the results file of the README's main job (benchmarks/readme_run.py)
README_MAX_LINES = 150
# A path the documentation cites: a file of the repository (with its extension) or a folder (with its slash).
CITED = re.compile(r"(?<![\w/.:<-])((?:autotune|benchmarks|tests|docs|search_spaces|\.ci)/[\w./*-]*"
                   r"(?:\.(?:py|md|txt|toml|json|png|css|js|log|db|sh|whl)|/))(?![\w<])")
# Paths a command writes when a user runs it, not files of the repository.
WRITTEN = ("docs/_build/",)
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def cited_paths(text: str) -> list[str]:
    """The repository paths a text cites, less those written by a command and those it says were removed."""
    out = []
    for match in CITED.finditer(text):
        path = match.group(1)
        placeholder = any(part.split(".")[0].isupper() for part in Path(path).parts)  # search_spaces/NAME.toml
        removed = text[match.end():match.end() + 12].lstrip("`").startswith(", removed")
        if path.startswith(WRITTEN) or placeholder or removed:
            continue
        out.append(path)
    return out


def exists(path: str) -> bool:
    return bool(glob.glob(str(ROOT / path))) if "*" in path else (ROOT / path).exists()


# ---------------------------------------------------------------- the README


def test_the_readme_is_short_and_its_first_screen_is_the_users():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"
    first_screen = "\n".join(lines[:20])
    assert "## Install" in first_screen and "pytest" not in first_screen  # the user's, not a contributor's
    assert "(docs/gpu.md)" in first_screen, "the first screen points a GPU user to the GPU page"
    assert all(f"(docs/{page.name})" in README.read_text(encoding="utf-8")
               for page in PAGES if page.stem not in ("index",)), "the README's table points to every page"


def test_the_readmes_output_is_a_run_that_was_printed():
    """The README's and the getting-started page's end of a study are copied from the results file they cite."""
    for doc in (README, DOCS / "getting-started.md"):
        text = doc.read_text(encoding="utf-8")
        (source,) = {p for p in cited_paths(text) if "readme_run" in p}
        printed = (ROOT / source).read_text(encoding="utf-8")
        block = text.split("```text\n", 1)[1].split("```", 1)[0]
        assert block.strip() and block.strip() in printed, f"{doc.name}: its output is not in {source}"
        assert "verdict:" in block and "recommended" in block


def text_blocks(text: str) -> list[str]:
    """The ``text`` code blocks of a page (what it quotes of a command's output)."""
    return [part.split("```", 1)[0] for part in text.split("```text\n")[1:]]


def test_the_readmes_words_about_its_run_are_the_files():
    """What the README says of the run it quotes holds in the results file: the command's wall time (the file's last
    line), the study's own time, the recommendation's processes in the front table (its race's and its claim's
    re-measurements: its search trial chose it and is left out), and the claim's fresh processes against the
    defaults' (the claim's rounds of the recommendation, as the file's trial lines count them)."""
    text = README.read_text(encoding="utf-8")
    (source,) = {p for p in cited_paths(text) if README_RUN in p}
    printed = (ROOT / source).read_text(encoding="utf-8")
    block = text_blocks(text)[0]
    prose = " ".join(text.split(block, 1)[1].split("## Three ways in", 1)[0].split())
    wall = re.search(r"exit code 0; (\d+) s\s*$", printed).group(1)
    assert f"({wall} s; `{source}`" in " ".join(text.split()), "the README's wall time is not the file's"
    assert f"The {wall} s are the command's wall time" in prose
    spent = re.search(r"time spent (\S+)", block).group(1)
    assert re.search(rf"trials \d+: .*time spent {spent}$", printed, re.MULTILINE) and f"`time spent {spent}`" in prose
    row = next(line for line in block.splitlines() if "recommended" in line and line.startswith("│"))
    number, processes = re.search(r"#(\d+) recommended", row).group(1), row.split("│")[4].strip()
    assert f"Row #{number} counts {processes} processes" in prose
    fresh, defaults = re.search(r"(\d+) processes against (\d+) of the defaults", block).groups()
    assert f"counts only its {fresh} fresh ones, against the defaults' {defaults}" in prose
    claim = len(re.findall(rf"^the claim, round \d+ of at most \d+: #{number} measured again", printed, re.MULTILINE))
    race = len(re.findall(rf"^race round \d+ of at most \d+: #{number} measured again", printed, re.MULTILINE))
    assert claim == int(fresh) and claim + race == int(processes), (claim, race, fresh, processes)
    assert f"the claim's {fresh};" in prose


def test_what_a_page_quotes_is_in_the_files_it_cites():
    """Every line of a ``text`` block on the front page and the GPU page is a line of a results file the page cites."""
    for doc in (DOCS / "index.md", DOCS / "gpu.md"):
        text = doc.read_text(encoding="utf-8")
        sources = [ROOT / p for p in cited_paths(text) if p.startswith("benchmarks/results/") and exists(p)]
        printed = {line.rstrip() for path in sources if path.is_file()
                   for line in path.read_text(encoding="utf-8", errors="replace").splitlines()}
        blocks = text_blocks(text)
        assert blocks, f"{doc.name} quotes no output"
        for block in blocks:
            for line in block.splitlines():
                assert line.rstrip() in printed, f"{doc.name}: {line!r} is in none of {[str(s) for s in sources]}"


def test_the_front_pages_quickstart_is_the_readmes():
    """The site's front page shows the README's set-up, test and run lines, as commands."""
    def commands(block: str) -> list[str]:
        return [row.split("#", 1)[0].strip() for row in block.splitlines() if row.split("#", 1)[0].strip()]

    readme = README.read_text(encoding="utf-8").split("## Set up, test, run", 1)[1].split("```", 2)[1]
    index = (DOCS / "index.md").read_text(encoding="utf-8").split("## Quickstart", 1)[1].split("```", 2)[1]
    assert commands(readme.split("\n", 1)[1]) == commands(index.split("\n", 1)[1])


def glossary_anchors() -> set[str]:
    """The anchors of the glossary's terms, as GitHub and MyST spell a heading's: lower case, punctuation dropped,
    spaces as hyphens."""
    headings = re.findall(r"^## (.+)$", GLOSSARY.read_text(encoding="utf-8"), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_glossary_link_names_a_term_it_defines():
    """The site's build checks the pages' links; GitHub checks none, and the README is not on the site."""
    anchors = glossary_anchors()
    assert {"race", "noise-floor", "recipe", "claim", "selection", "pareto-front", "least-change", "opening",
            "neighbour", "unconfirmed", "mfu"} <= anchors
    for doc in (README, *PAGES):
        for anchor in re.findall(r"glossary\.md#([\w-]+)", doc.read_text(encoding="utf-8")):
            assert anchor in anchors, f"{doc.name}: glossary.md#{anchor} is not a term of the glossary"


#: Words for the package's developers: issue numbers, commits, their variables, internal names (a stored record's
#: keys, which docs/storage.md documents, are the user's to read).
DEVELOPMENT_WORDS = re.compile(r"\bissue \d+|the issue's|\bAUTOTUNE_(?:PAIRED|DOCS_PICTURE|TRACE)\b|\bknobs\.apart\b"
                               r"|\bcommit [0-9a-f]{7}\b|\b(?:committed|renamed) in [0-9a-f]{7}\b")


def test_user_pages_carry_no_development_words():
    found = [f"{doc.name}: {m.group(0)!r}" for doc in (README, *PAGES) if doc.name not in CONTRIBUTORS
             for m in DEVELOPMENT_WORDS.finditer(doc.read_text(encoding="utf-8"))]
    assert not found, ("development words on user pages (they belong on architecture or contributing):\n"
                       + "\n".join(found))


# ---------------------------------------------------------------- no drift


def test_nothing_cites_a_file_the_repository_does_not_hold():
    documents = [README, *PAGES, ROOT / "benchmarks" / "README.md"]
    missing = [f"{doc.relative_to(ROOT)}: {path}" for doc in documents
               for path in cited_paths(doc.read_text(encoding="utf-8")) if not exists(path)]
    assert not missing, "cited but not in the repository:\n" + "\n".join(missing)


def test_the_citation_check_sees_a_missing_file():
    text = "see `benchmarks/results/nothing-2026-01-01.txt` and `autotune/nothing.py`, `docs/_build/html/`"
    assert cited_paths(text) == ["benchmarks/results/nothing-2026-01-01.txt", "autotune/nothing.py"]
    assert not any(exists(p) for p in cited_paths(text))
    assert cited_paths("(`autotune/evidence/model.py`, removed 2026-11-25)") == []


def test_no_module_or_test_cites_a_design_file_outside_the_repository():
    sources = [*ROOT.glob("autotune/**/*.py"), *ROOT.glob("tests/*.py"), *ROOT.glob("benchmarks/*.py")]
    cites = [f"{p.relative_to(ROOT)}" for p in sources
             if re.search(r"DESIGN\.md|design (?:file|doc)|the design's", p.read_text(encoding="utf-8"))
             and p.name != "test_docs.py"]
    assert not cites, cites


def docs_extension():
    """docs/_ext/autotune_docs.py, the site's own directives (imported as the site's build imports it)."""
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        import autotune_docs
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    return autotune_docs


def test_the_knob_page_is_generated_from_the_registry():
    """docs/knobs.md holds the registry's table as Markdown (what GitHub shows), equal to what the site builds from
    the registry; the site draws its own in its place; no knob row is written anywhere else on the page."""
    pytest.importorskip("docutils")
    ext = docs_extension()
    text = (DOCS / "knobs.md").read_text(encoding="utf-8")
    written = ext.written_table(text)
    assert written is not None, f"docs/knobs.md has no knob table between {ext.BEGIN!r} and {ext.END!r}"
    assert written == ext.knob_markdown(), ("docs/knobs.md's knob table is not the registry's: run "
                                            "`python docs/_ext/autotune_docs.py` to write it again")
    assert [f"`{name}`" for name in knobs.NAMES] == [row.split(" | ")[0][2:] for row in written.splitlines()[2:]]
    outside = text.replace(written, "")
    hand_written = [name for name in knobs.NAMES if re.search(rf"^\| `{name}`", outside, re.MULTILINE)]
    assert not hand_written, f"knob rows written by hand in docs/knobs.md: {hand_written}"
    source = [text]
    ext.site_source(None, "knobs", source)
    assert "```{knob-table}" in source[0] and ext.written_table(source[0]) is None


def results_sections(page: Path = RESULTS_PAGE) -> list[tuple[str, str]]:
    """(heading, body) of each ``## `` section of the results page (or the history page)."""
    parts = re.split(r"^## (.+)$", page.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return list(zip(parts[1::2], parts[2::2]))


def file_date(path: Path) -> str | None:
    """The date a results file carries: its ``# date:`` header, else the date in its name."""
    if path.suffix == ".txt":
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()[:12]:
            if line.startswith("# date:"):
                found = DATE.search(line)
                if found:
                    return found.group(0)
    found = DATE.search(path.name)
    return found.group(0) if found else None


@pytest.mark.parametrize("page", [RESULTS_PAGE, HISTORY_PAGE], ids=lambda p: p.stem)
def test_every_results_section_names_the_files_that_printed_it_and_their_dates(page):
    sections = results_sections(page)
    assert len(sections) >= 10
    for heading, body in sections:
        first = body.strip().split("\n\n", 1)[0]
        assert first.startswith("Printed by "), f"{page.stem}, {heading!r}: its first line does not say what printed it"
        files = [p for p in cited_paths(first) if p.startswith("benchmarks/results/")]
        assert files, f"{page.stem}, {heading!r}: cites no file of benchmarks/results/"
        for path in files:
            assert exists(path), f"{page.stem}, {heading!r}: {path} does not exist"
            date = file_date(ROOT / path)
            assert date is None or date in first, f"{page.stem}, {heading!r}: {path} is of {date}, not said"


def test_the_results_page_opens_with_the_gpus():
    """What a user compares against comes first, GPUs first: the H100's proof, then the H200's study."""
    headings = [h for h, _ in results_sections()]
    assert "H100" in headings[0] and "H200" in headings[1], headings[:2]
    assert "(history.md)" in RESULTS_PAGE.read_text(encoding="utf-8")


# ---------------------------------------------------------------- the site, built


def build_command() -> list[str]:
    """The README's command that builds the site."""
    text = README.read_text(encoding="utf-8")
    (line,) = [part for row in text.splitlines() if "sphinx-build" in row and not row.startswith("`")
               for part in row.split("&&") if "sphinx-build" in part]
    return shlex.split(line, comments=True)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built as the README says, into a temporary folder (warnings as errors)."""
    command = build_command()
    assert command[0] == "sphinx-build" and "-W" in command and command[-2:] == ["docs", "docs/_build/html"]
    if shutil.which("sphinx-build") is None:
        need("sphinx is not installed (pip install -e '.[docs]'): the documentation cannot be built")
    for module in ("furo", "myst_parser", "sphinx_click"):
        try:
            __import__(module)
        except ImportError:
            need(f"{module} is not installed (pip install -e '.[docs]'): the documentation cannot be built")
    out = tmp_path_factory.mktemp("site") / "html"
    done = subprocess.run([sys.executable, "-m", "sphinx", *command[1:-1], str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"the site does not build:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    assert "WARNING" not in done.stderr
    return out


def html(site: Path, page: str) -> str:
    return (site / f"{page}.html").read_text(encoding="utf-8")


@pytest.mark.slow  # the build: about 15 s on a 2-core CPU
def test_the_site_builds_and_every_page_is_in_it(site):
    for page in PAGES:
        assert (site / f"{page.stem}.html").exists(), page.name
    assert "_images/dashboard.png" in html(site, "dashboard") and (site / "_images" / "dashboard.png").exists()


@pytest.mark.slow
def test_every_public_name_and_every_command_is_in_the_reference(site):
    api = html(site, "api")
    for name in autotune.__all__:
        if name != "__version__":
            assert f'id="autotune.{name}"' in api, f"autotune.{name} is not in the API reference"
    cli = html(site, "cli")
    for name in main.commands:
        assert f'id="autotune-{name}"' in cli, f"autotune {name} is not in the command line reference"


@pytest.mark.slow
def test_the_knob_table_and_the_layers_are_generated(site):
    page = html(site, "knobs")
    table = page.split('class="knob-table', 1)[1].split("</table>", 1)[0]
    for knob in knobs.REGISTRY:
        assert f"<span class=\"pre\">{knob.name}</span>" in table, knob.name
    architecture = html(site, "architecture")
    for room in ("autotune.cli", "autotune.tuning.phases", "autotune.trial.forkserver", "autotune.errors"):
        assert f"<span class=\"pre\">{room}</span>" in architecture, room

"""Every ``autotune ...`` command line of README.md, of the documentation's pages (docs/*.md) and of each command's
``--help`` examples runs to the end.

The lines are read from the shell code blocks of README.md and of each page (continuations joined, comments dropped) and
from the ``Examples:`` of each click command's help. Each runnable line runs in-process through click's CliRunner, in a
temporary folder (one per document), in the order written (status, export and dashboard lines read the study an
earlier run line of the same document made), with a smaller budget than written:

- ``run`` and ``submit``: ``--trials 2 --quick --confirm 0`` (whatever ``--trials`` the line gives);
- ``measure``: ``--quick``;
- a ``journal:/shared/...`` file (a shared file system in the fleet examples) lives under the temporary folder;
- ``> FILE`` writes the command's output to FILE, as the shell would.

A line that cannot run here is listed in EXCLUDED with the reason. A line in neither (a new line that does not run)
fails the test, and so does an exclusion whose line is gone, so that each line is run or consciously left out.
A line with an ``hf:`` model runs where transformers is installed (the test extra installs it); elsewhere the test
skips once the other lines ran, naming the lines left out, and fails so in CI (autotune.testing.suite.need).

CI (.ci/run) runs the README's set-up and test lines as written: a test below holds them equal.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from autotune.testing.suite import need

from autotune.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCUMENTS = (README, *sorted((ROOT / "docs").glob("*.md")))  # the README, then the site's pages
CI_RUN = ROOT / ".ci" / "run"

ILLUSTRATION = "an illustration: mypkg stands for the user's own package"
POSTGRES = "an illustration: needs the user's PostgreSQL server (db)"
VERDICT = ("its exit code is a verdict (1 unless the claim holds on this machine), and the tiny studies these lines "
           "make (2 trials, no race) export no claim with an interval to verify; tests/test_verify.py runs it for real")
EXCLUDED: dict[str, str] = {
    # README.md
    "autotune run --model mypkg.models:build_model --data mypkg.data:build_dataset --space search_spaces/cnn.toml "
    "--study mymodel --time-budget 2h --max-memory 20GiB": ILLUSTRATION,
    "autotune run --model mypkg.models:build_model --workers 2": ILLUSTRATION,
    "autotune run --model mypkg.models:build_model --devices 0,1,2,3": ILLUSTRATION + "; and four GPUs",
    "autotune submit --model mypkg.models:build_model --trials 50 --storage postgresql://tuner@db/autotune":
        ILLUSTRATION + "; " + POSTGRES,
    "AUTOTUNE_STORAGE=postgresql://tuner:...@db/autotune autotune worker --all": POSTGRES,
    "autotune list --storage postgresql://tuner@db/autotune": POSTGRES,
    # --help examples
    "autotune measure --model mypkg.models:build --data mypkg.data:build --repeat 5 --json": ILLUSTRATION,
    "autotune run --model mypkg.models:build --data mypkg.data:build --time-budget 2h --max-memory 20GiB": ILLUSTRATION,
    "autotune run --model mypkg.models:build --workers 2 --study mymodel": ILLUSTRATION,
    "autotune worker --study mynet --storage postgresql://tuner@db/autotune": POSTGRES,
    "autotune worker --all --storage postgresql://tuner@db/autotune": POSTGRES,
    "autotune submit --model mypkg.models:build --trials 50 --storage postgresql://tuner@db/autotune":
        ILLUSTRATION + "; " + POSTGRES,
    "autotune status mynet --storage postgresql://tuner@db/autotune --json": POSTGRES,
    "autotune trials mynet --storage postgresql://tuner@db/autotune --json": POSTGRES,
    "autotune dashboard mynet --watch 30": "runs until Ctrl-C (rewrites the page every 30 s)",
    "autotune verify best.json": VERDICT,
    "autotune verify best.json --rounds 6 --json > verified.json": VERDICT,
}
# What marks a line that cannot run here as written: such a line must be in EXCLUDED (a fast check, before anything
# runs).
UNRUNNABLE = (
    ("mypkg", "names the user's own package"),
    ("postgresql://", "needs a PostgreSQL server"),
    ("--devices", "needs GPUs"),
    ("--watch", "runs until Ctrl-C"),
)
# --help examples run command by command in this order: the commands that make studies or jobs before those that
# serve or read them (submit before worker). A command not named here runs last.
HELP_ORDER = ("knobs", "measure", "run", "submit", "worker", "list", "status", "trials", "export", "dashboard")
SHELL_FENCES = ("", "bash", "sh", "shell", "console")
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
SHARED = "/shared/"
HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None


# ---------------------------------------------------------------- reading the lines


def normalise(line: str) -> str:
    """A command line as its words: comments dropped, spaces collapsed (the form EXCLUDED lists)."""
    return " ".join(shlex.split(line, comments=True))


def is_command(line: str) -> bool:
    words = shlex.split(line, comments=True)
    while words and ENV_ASSIGNMENT.match(words[0]):
        words.pop(0)
    return bool(words) and words[0] == "autotune"


def readme_lines(text: str) -> list[str]:
    """The ``autotune`` command lines of the markdown's shell code blocks, in order."""
    lines: list[str] = []
    fence: str | None = None
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("```"):
            fence = stripped[3:].strip().lower() if fence is None else None
            pending = ""
            continue
        if fence is None or fence not in SHELL_FENCES:
            continue
        if stripped.startswith("$ "):
            stripped = stripped[2:]
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        line, pending = pending + stripped, ""
        if line and is_command(line):
            lines.append(normalise(line))
    return lines


def help_lines() -> list[tuple[str, str]]:
    """``(command, line)`` for every ``autotune ...`` line in the Examples of each command's help, in HELP_ORDER."""
    out: list[tuple[str, str]] = []
    for name, command in main.commands.items():
        examples = (command.help or "").split("Examples:", 1)
        pending = ""
        for raw in examples[1].splitlines() if len(examples) == 2 else []:
            if raw.strip().endswith("\\"):
                pending += raw.strip()[:-1] + " "
                continue
            line, pending = pending + raw.strip(), ""
            if is_command(line):
                out.append((name, normalise(line)))
    order = {name: i for i, name in enumerate(HELP_ORDER)}
    return sorted(out, key=lambda item: order.get(item[0], len(order)))  # stable: each command's lines keep their order


def document_lines() -> dict[str, list[str]]:
    """Each document's command lines, by its path from the repository's root."""
    return {str(path.relative_to(ROOT)): readme_lines(path.read_text(encoding="utf-8")) for path in DOCUMENTS}


def all_lines() -> list[str]:
    return [line for lines in document_lines().values() for line in lines] + [line for _, line in help_lines()]


# ---------------------------------------------------------------- running them


def _option(args: list[str], name: str) -> str | None:
    for i, word in enumerate(args):
        if word == name and i + 1 < len(args):
            return args[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def _set(args: list[str], name: str, value: str) -> list[str]:
    """``args`` with option ``name`` set to ``value`` (replaced where given, else added)."""
    out: list[str] = []
    skip = False
    for i, word in enumerate(args):
        if skip:
            skip = False
        elif word == name and i + 1 < len(args):
            skip = True
        elif not word.startswith(name + "="):
            out.append(word)
    return out + [name, value]


def _flag(args: list[str], name: str) -> list[str]:
    return args if name in args else args + [name]


def shrink(args: list[str]) -> list[str]:
    """The smaller budget of the module docstring."""
    command = args[0]
    if command in ("run", "submit"):
        args = _flag(_set(_set(args, "--trials", "2"), "--confirm", "0"), "--quick")
    elif command == "measure":
        args = _flag(args, "--quick")
    return args


def run_line(line: str, folder: Path) -> str | None:
    """Run one line in ``folder`` (the current directory); None when it ends with exit code 0, else why not."""
    words = shlex.split(line, comments=True)
    env: dict[str, str | None] = {}
    while ENV_ASSIGNMENT.match(words[0]):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    args = [w.replace(SHARED, f"{folder}{SHARED}") if w.startswith("journal:") else w for w in words[1:]]
    target = None
    if ">" in args:
        at = args.index(">")
        target, args = args[at + 1], args[:at]
    args = shrink(args)
    if any(w.startswith(f"journal:{folder}{SHARED}") for w in args):
        (folder / SHARED.strip("/")).mkdir(exist_ok=True)
    result = CliRunner().invoke(main, args, env=env)
    if result.exit_code == 0:
        if target is not None:
            (folder / target).write_text(result.output)
        return None
    import traceback

    trace = "".join(traceback.format_exception(*result.exc_info)) if result.exc_info and result.exception else ""
    return f"$ autotune {shlex.join(args)}\nexit code {result.exit_code}\n{result.output[-3000:]}{trace[-3000:]}"


def run_in_order(lines: list[str], folder: Path, monkeypatch: pytest.MonkeyPatch,
                 has_transformers: bool = HAS_TRANSFORMERS) -> tuple[list[str], list[str]]:
    """Run every line not excluded, in order, in ``folder``; the failures, and the ``hf:`` lines left out for want
    of transformers (the caller says so once the failures are told: :func:`no_line_left_out`)."""
    monkeypatch.chdir(folder)
    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    failures: list[str] = []
    left_out: list[str] = []
    for line in lines:
        if line in EXCLUDED:
            continue
        if " hf:" in line and not has_transformers:
            left_out.append(line)
            continue
        start = time.monotonic()
        failure = run_line(line, folder)
        print(f"{time.monotonic() - start:6.1f} s  {line}")  # shown with pytest -s: where the module's time goes
        if failure:
            failures.append(failure)
    return failures, left_out


def no_line_left_out(left_out: list[str]) -> None:
    """The ``hf:`` lines that did not run: a skip saying which and why (a failure in CI, where transformers is
    installed)."""
    if left_out:
        need(f"transformers is not installed (pip install -e '.[test]' installs it): {len(left_out)} line(s) with an "
             f"hf: model did not run: {'; '.join(left_out)}")


# ---------------------------------------------------------------- the tests


def test_every_line_is_run_or_excluded():
    documents = document_lines()
    readme = documents["README.md"]
    docs = [line for name, lines in documents.items() if name != "README.md" for line in lines]
    helps = [line for _, line in help_lines()]
    # the reader found them: the README's main job, the getting-started page's tour, every command's examples
    assert "autotune run --model autotune.examples:mlp --trials 20" in readme and len(readme) >= 4
    assert len(docs) >= 10 and "autotune knobs" in docs and len(helps) >= 20
    lines = set(readme + docs + helps)
    for line in lines:
        for mark, why in UNRUNNABLE:
            assert mark not in line or line in EXCLUDED, (
                f"{line!r} {why}: it cannot run here as written; change it, or list it in EXCLUDED with the reason")
    gone = [line for line in EXCLUDED if line not in lines]
    assert not gone, f"EXCLUDED lists lines that README.md, docs/*.md and the --help examples no longer have: {gone}"
    assert all(reason.strip() for reason in EXCLUDED.values())


def test_reading_lines():
    text = "\n".join([
        "```bash",
        "autotune run --model a:b \\",
        "             --trials 30          # a comment",
        "X=1 autotune list",
        "pip install -e .",
        "```",
        "```python",
        "autotune.tune(build)",
        "```",
        "`autotune knobs` in prose is not a command line",
    ])
    assert readme_lines(text) == ["autotune run --model a:b --trials 30", "X=1 autotune list"]
    assert shrink(["run", "--model", "m:f", "--trials", "30", "--confirm", "3"]) == [
        "run", "--model", "m:f", "--trials", "2", "--confirm", "0", "--quick"]
    assert shrink(["run", "--model", "m:f"]) == ["run", "--model", "m:f", "--trials", "2", "--confirm", "0", "--quick"]
    assert shrink(["export", "s", "--pick", "smallest"]) == ["export", "s", "--pick", "smallest"]
    assert shrink(["measure", "--model", "m:f"]) == ["measure", "--model", "m:f", "--quick"]
    assert ("knobs", "autotune knobs") in help_lines()


@pytest.mark.slow  # about a minute per document with runnable lines on a 2-core CPU
@pytest.mark.parametrize("document", [name for name, lines in document_lines().items() if lines])
def test_readme_lines_run(document, tmp_path, monkeypatch):
    """The README's lines, and each page's, each document in a folder of its own."""
    failures, left_out = run_in_order(document_lines()[document], tmp_path, monkeypatch)
    assert not failures, f"{document} lines that fail:\n\n" + "\n\n".join(failures)
    no_line_left_out(left_out)


@pytest.mark.slow  # about two minutes on a 2-core CPU
def test_help_examples_run(tmp_path, monkeypatch):
    failures, left_out = run_in_order([line for _, line in help_lines()], tmp_path, monkeypatch)
    assert not failures, "--help examples that fail:\n\n" + "\n\n".join(failures)
    no_line_left_out(left_out)


def test_hf_lines_without_transformers_are_named_and_fail_in_ci(tmp_path, monkeypatch):
    """Where transformers is missing, an hf: line is not run, and the test says so: it skips naming the line,
    and fails so in CI. (Nothing is run: the only line is an hf: one.)"""
    line = "autotune run --model hf:gpt2 --trials 20"
    failures, left_out = run_in_order([line], tmp_path, monkeypatch, has_transformers=False)
    assert failures == [] and left_out == [line]
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="transformers is not installed.*hf:gpt2"):
        no_line_left_out(left_out)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="transformers is not installed.*hf:gpt2"):
        no_line_left_out(left_out)
    no_line_left_out([])  # nothing left out: nothing to say, in CI too


def test_help_examples_are_those_help_prints():
    """The lines read are the ones `autotune COMMAND --help` prints (click keeps the \\b paragraphs as written)."""
    for name, line in help_lines():
        text = CliRunner().invoke(main, [name, "--help"]).output.replace("\\\n", " ")
        assert line in {normalise(row.strip()) for row in text.splitlines() if row.strip().startswith("autotune ")}


# ---------------------------------------------------------------- CI runs what the README says


def readme_setup_lines(text: str) -> dict[str, str]:
    """The README's set-up and test commands, from the code block of "Set up, test, run": each line's command (its
    comment dropped) by the comment's first word; and the torch pin its set-up comment asks for first."""
    block = text.split("## Set up, test, run", 1)[1].split("```", 2)[1]
    out: dict[str, str] = {}
    for raw in block.splitlines():
        command, _, comment = raw.partition("#")
        role = comment.strip().split(" ", 1)[0]
        if role in ("set-up", "test"):
            out[role] = command.strip()
            first = re.search(r"first: ([^)]+)\)", comment)
            if first:
                out[f"{role}, first"] = first.group(1).strip()
    return out


def script_commands(text: str) -> list[str]:
    """A shell script's lines that are commands (not blank, not comments), stripped."""
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def test_ci_runs_the_readmes_set_up_and_test_lines_as_written():
    readme = readme_setup_lines(README.read_text(encoding="utf-8"))
    assert readme == {"set-up": "pip install -e '.[test]'", "set-up, first": "pip install torch==2.13.0",
                      "test": "pytest -q"}, readme  # the reader found them (update with the README)
    commands = script_commands(CI_RUN.read_text(encoding="utf-8"))
    for role, line in readme.items():
        assert line in commands, f".ci/run does not run the README's {role} line as written: {line!r}"
    assert commands.index(readme["set-up, first"]) < commands.index(readme["set-up"]) < commands.index(readme["test"])
    assert commands[-1] == readme["test"], "the README's test line is the last thing CI runs: its exit code is CI's"
    # nothing else installs the checkout or runs the tests in another way (python3 -m pytest, pip install -e .)
    others = [c for c in commands if c not in readme.values() and (re.search(r"\bpytest\b", c) or "install -e" in c)]
    assert not others, f".ci/run runs the tests or the set-up otherwise than the README says: {others}"
    assert "export CI=true" in commands  # a test that cannot run fails there (autotune.testing.suite.need)

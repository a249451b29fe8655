"""Typed errors and their terms (autotune.errors): a message names an option once, as a term; str() reads in the
command line's words, an edge words each term its own way, and no surface's text is rewritten."""

from __future__ import annotations

import ast
import inspect
import json
import pickle
import re
from pathlib import Path


from autotune import errors
from autotune.errors import (CLOSE, OPEN, AutotuneError, FieldValueError, Said, StorageUnreachable, StudyError,
                             WorkloadError, either, in_words, named, said)

ROOT = Path(__file__).resolve().parents[1]


def python(name: str) -> str:
    """A surface's words for the tests: a keyword that differs from its field's name, as the API's do."""
    return {"trial_timeout_s": "trial_timeout"}.get(name, name)


def test_str_reads_in_the_command_lines_words_and_an_edge_in_its_own():
    exc = StudyError(f"was made with {named('max_memory_bytes', '--max-memory 20 GiB', repr('20 GiB'))}; start a new "
                     f"study with {named('study', '--study mlp-2', repr('mlp-2'))} or raise "
                     f"{named('trial_timeout_s', '--trial-timeout')}")
    assert str(exc) == ("was made with --max-memory 20 GiB; start a new study with --study mlp-2 or raise "
                        "--trial-timeout")
    worded = exc.in_words(python)
    assert str(worded) == ("was made with max_memory_bytes='20 GiB'; start a new study with study='mlp-2' or raise "
                           "trial_timeout=")
    assert type(worded) is StudyError and OPEN not in worded.said and exc.said != str(exc)


def test_a_phrase_with_no_option_is_said_each_surfaces_way():
    text = f"fix the model ({either('autotune measure --model ...', 'autotune.measure(model)')} shows the error)"
    assert in_words(text) == "fix the model (autotune measure --model ... shows the error)"
    assert in_words(text, python) == "fix the model (autotune.measure(model) shows the error)"


def test_terms_survive_what_a_message_goes_through():
    """Composed into another message, pickled to another process, its attributes kept when worded."""
    inner = f"pass {named('storage', '--storage')}"
    exc = StorageUnreachable(f"the server is down: {inner}", reason="refused")
    back = pickle.loads(pickle.dumps(exc))
    assert str(back) == "the server is down: pass --storage" and back.reason == "refused"
    worded = back.in_words(python)
    assert str(worded) == "the server is down: pass storage=" and worded.reason == "refused"
    assert isinstance(worded, StorageUnreachable) and worded.exit_code == exc.exit_code


def test_a_value_cannot_break_out_of_its_term_and_stray_markers_stay_text():
    nasty = f"a{OPEN}b{CLOSE}c'\"\n"
    text = named("model", f"--model {nasty!r}", repr(nasty))
    assert text.count(OPEN) == 1 and text.count(CLOSE) == 1  # JSON writes control characters as escapes
    assert in_words(text) == f"--model {nasty!r}" and in_words(text, python) == f"model={nasty!r}"
    stray = f"user output {OPEN}not a term{CLOSE} and {OPEN} alone"
    assert in_words(stray) == stray == in_words(stray, python)
    assert str(WorkloadError(f"{stray} {named('data', '--data')}")) == f"{stray} --data"


def test_a_plain_message_is_untouched_and_a_field_error_keeps_its_own_words():
    assert str(WorkloadError("no terms here")) == "no terms here" == WorkloadError("no terms here").said
    assert str(AutotuneError()) == ""
    from autotune.request import FIELDS

    bad = FIELDS["trial_timeout_s"].error("must be positive, not -1", -1)  # as the declaration makes it
    assert (isinstance(bad, FieldValueError)
            and (bad.field, bad.problem, bad.value) == ("trial_timeout_s", "must be positive, not -1", -1))
    # built directly: the request's words
    assert str(bad) == "the trial timeout (trial_timeout_s=) must be positive, not -1"
    assert str(bad.in_words(python)) == "the trial timeout (trial_timeout=) must be positive, not -1"
    assert in_words(bad.said) == "the trial timeout (--trial-timeout) must be positive, not -1"
    again = pickle.loads(pickle.dumps(bad))
    assert type(again) is FieldValueError and str(again) == str(bad) and again.value == -1


def test_a_text_that_is_no_error_reads_as_the_command_lines_wherever_it_goes():
    """A verdict's text: the CLI's words as a str (stored, compared, written to JSON, pickled), its terms kept."""
    text = Said(f"measured once (run with {named('confirm', '--confirm')})")
    assert (text == "measured once (run with --confirm)"
            and json.dumps([text]) == '["measured once (run with --confirm)"]')
    assert text.in_words(python) == "measured once (run with confirm=)"
    again = pickle.loads(pickle.dumps(text))
    assert again == text and again.in_words(python) == text.in_words(python)
    composed = Said(f"{said(text)}; on a busy machine")
    assert (composed == f"{text}; on a busy machine"
            and composed.in_words(python).endswith("(run with confirm=); on a busy machine"))
    assert said("plain") == "plain" and OPEN not in f"{text}"


def test_errors_import_nothing_of_autotunes():
    """The lowest layer: the words come from the request's declaration, above it."""
    tree = ast.parse(inspect.getsource(errors))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert not any(name and name.split(".")[0] == "autotune" for name in imported), imported


#: Texts below the edges that still spell a declared option in the command line's words, and why. Every other
#: message names its options as terms (autotune.request.option), which each surface words as its own.
CLI_WORDS_LEFT = {
    "autotune/tuning/phases/race.py": "why the race stopped: stored with the study's race record and composed into "
                               "the run's summary line by autotune.tuning.loop, which shows it as text",
    "autotune/tuning/phases/bought.py": "as the race's: why the ablation stopped, stored with its record",
    "autotune/tuning/phases/search.py": "why the search stopped: composed into the run's summary line by "
                                        "autotune.tuning.loop",
    "autotune/tuning/progress.py": "the lines a run prints as each trial ends (its own wording for both surfaces)",
    "autotune/evidence/ceiling.py": "the batch ceiling's text, of what is stored with the study, printed as it is",
    "autotune/knobs/registry.py": "a knob's description (the knobs table and the space files' comments)",
    "autotune/testing/studies.py": "made-up studies for tests and benchmarks: the race record's stored text, as the "
                                   "race writes it",
    "autotune/workloads/shipping.py": "a command line given as one on both surfaces (`autotune worker --study NAME`), "
                            "beside its Python counterpart (autotune.tune(..., study=NAME))",
}


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    """The string constants of a module that could reach a user: not docstrings, not a whole argv element
    (``["--device", "cuda:0"]`` starts the command line), not the text a term is made of."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.add(id(first.value))
        if (isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", "")) in ("named", "either")):
            skip.update(id(n) for arg in node.args for n in ast.walk(arg))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip]


def test_no_message_below_the_edges_spells_a_declared_option():
    from autotune.request import FIELDS, NAMED

    flags = {d.cli for d in (*FIELDS.values(), *NAMED.values()) if d.cli}
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "autotune").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("autotune/cli/") or rel in ("autotune/api.py", "autotune/request.py"):
            continue  # the edges, and the declaration itself
        for line, text in _strings(ast.parse(path.read_text())):
            spelled = sorted(set(re.findall(r"(?<![\w-])--[a-z][\w-]*", text)) & flags)
            if spelled and text not in flags:
                found.setdefault(rel, []).append(f"{line}: {spelled}")
    unexplained = {rel: lines for rel, lines in found.items() if rel not in CLI_WORDS_LEFT}
    assert not unexplained, f"name these options with autotune.request.option: {unexplained}"
    assert not set(CLI_WORDS_LEFT) - set(found), "listed but spelling no option any more: take it out of CLI_WORDS_LEFT"


def test_plain_words_every_term_of_json_data_in_the_command_lines_words():
    data = {"a": f"raise {named('trial_timeout_s', '--trial-timeout')}", "b": [f"x {named('study', '--study s')}", 3],
            "c": None, "d": Said(f"y {named('study', '--study t')}")}
    out = errors.plain(data)
    assert out == {"a": "raise --trial-timeout", "b": ["x --study s", 3], "c": None, "d": "y --study t"}
    assert OPEN not in json.dumps(out) and CLOSE not in json.dumps(out)


def test_no_marker_reaches_a_stored_trial_an_export_a_framework_snippet_or_a_printed_line(tmp_path):
    """A trial's failure worded with a term (as the compile limit's is), built as a plain str: the marks it leaves, the
    export and every framework's snippet of the study, and what status and export print hold no marker."""
    from click.testing import CliRunner

    from autotune import knobs
    from autotune import result as R
    from autotune.cli import main
    from autotune.export import document, frameworks
    from autotune.knobs import space
    from autotune.request import option
    from autotune.store import Store
    from autotune.testing import fake as M
    from autotune.testing import studies as made_up
    from autotune.tuning import loop
    from autotune.tuning.phases import Bench, Seeds

    ctx = knobs.Context(device_type="cpu", task="train", input_rank=4, cpu_count=2)
    sp = space.parse({"search": {"precision": ["fp32", "bf16"], "batch_size": [32, 64, 128]}}, "w.toml", "w")
    url = f"sqlite:///{tmp_path}/w.db"
    live = made_up.live_study(url, "w", sp, ctx, seed=0, grace_s=None)
    measure = M.lognormal(lambda c: 2.0 if c["precision"] == "bf16" else 1.0, 0, 0.05)

    def evaluate(config, dominators=(), margin=None, **_):
        if config["batch_size"] == 128:
            return R.TrialResult.failure(R.SLOWER, f"stopped: past the compile limit ({option('compile_limit_s')})")
        return measure(config)

    base = loop.base_config(ctx, sp.fixed, None)
    loop.Tuner(live, Seeds(space.effective(sp, ctx, base), ctx, base), Bench(evaluate),
            loop.Options(trials=6, numerics="off")).run()
    study = Store(url, read_only=True).read("w")
    slower = [t for t in study.trials if t.outcome == R.SLOWER]
    assert slower and all(t.error["message"].endswith("(--compile-limit)") for t in slower)
    texts = [json.dumps([dict(t.error or {}) for t in study.trials])]
    for pick in ("recommended", "fastest"):
        doc = document.export(study, pick)
        texts.append(json.dumps(doc))
        texts += [json.dumps(frameworks.render(doc, fmt)) for fmt in frameworks.FORMATS]
    runner = CliRunner()
    for args in (["status", "w", "--storage", url], ["status", "w", "--storage", url, "--json"],
                 ["trials", "w", "--storage", url], ["export", "w", "--storage", url]):
        result = runner.invoke(main, args)
        assert result.exit_code == 0, result.output
        texts.append(result.output)
    assert not [t for t in texts if OPEN in t or CLOSE in t]

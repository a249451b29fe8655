"""A study of the launch space end to end, as a user runs it: ``autotune run --space launch``, the export's launch,
and ``autotune verify`` of the recommendation and of a launched configuration of the front.

    python benchmarks/launch_study.py [--model autotune.examples:cnn] [--trials 12]

In a temporary folder: runs ``autotune run --model M --space launch --trials N``; prints which trials ran several
ranks, a preloaded allocator or bound cores, and the verdict; exports the recommendation and the front's ``balanced``
point (``autotune export --pick``) and prints each export's launch command; verifies each (``autotune verify``) and
prints its last line and exit status. Writes benchmarks/results/launch_study-<date>.json and .txt.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import harness
from harness import say

LAUNCHED = ("ranks", "host_allocator", "core_binding")  # the knobs of a launch counted here, off their defaults


def cli(folder: Path, *args: str) -> tuple[int, str, float]:
    start = time.perf_counter()
    done = subprocess.run(["autotune", *args], cwd=folder, capture_output=True, text=True, timeout=1800)
    return done.returncode, done.stdout + done.stderr, time.perf_counter() - start


def main() -> None:
    ap = harness.arguments(__doc__, trials=12)
    ap.add_argument("--model", default="autotune.examples:cnn")
    args = ap.parse_args()
    from autotune import knobs

    harness.start_on_this_machine()
    out: dict[str, Any] = {"model": args.model, "trials": args.trials}
    with tempfile.TemporaryDirectory(prefix="autotune-launch-study-") as tmp:
        folder = Path(tmp)
        rc, text, wall = cli(folder, "run", "--model", args.model, "--space", "launch", "--trials", str(args.trials))
        say(f"autotune run --model {args.model} --space launch --trials {args.trials}: exit {rc} in {wall:.0f} s")
        out["run"] = {"rc": rc, "wall_s": wall}
        study = next(line.split()[1] for line in text.splitlines() if line.startswith("study "))
        doc = json.loads(cli(folder, "status", study, "--json")[1])
        defaults = knobs.defaults()
        launched: dict[str, list[int]] = {k: [] for k in LAUNCHED}
        for row in json.loads(cli(folder, "trials", study, "--json")[1]):
            for knob in LAUNCHED:
                if row.get("outcome") == "ok" and (row.get("config") or {}).get(knob, defaults[knob]) != defaults[knob]:
                    launched[knob].append(row["number"])
        for knob, numbers in launched.items():
            say(f"  trials measured with {knob} changed: {', '.join(f'#{n}' for n in numbers) or 'none'}")
        say(f"  verdict: {doc['verdict']['text']}")
        out["launched"], out["verdict"] = launched, doc["verdict"]["text"]
        out["exports"] = {}
        for pick in ("recommended", "balanced"):
            path = f"{pick}.json"
            rc, text, _ = cli(folder, "export", study, "--pick", pick, "-o", path)
            exported = json.loads((folder / path).read_text())
            say(f"export --pick {pick}: trial #{exported['study']['trial']}; launch: {exported['launch']['command']}")
            rc, text, wall = cli(folder, "verify", path)
            last = text.strip().splitlines()[-1] if text.strip() else ""
            say(f"  autotune verify {path}: exit {rc} in {wall:.0f} s: {last}")
            out["exports"][pick] = {"trial": exported["study"]["trial"], "launch": exported["launch"],
                                    "verify_rc": rc, "verify": last}
    harness.write(args, out)


if __name__ == "__main__":
    main()

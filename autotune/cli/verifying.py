"""``autotune verify``: does an exported claim still hold on this machine? (:mod:`autotune.export.verify`)."""

from __future__ import annotations

import json
import sys
import click

from autotune.cli.options import options
from autotune.request import VERIFY_ROUNDS, parse_model_args

ROUNDS = click.option("--rounds", type=click.IntRange(VERIFY_ROUNDS[0], VERIFY_ROUNDS[2]), default=VERIFY_ROUNDS[1],
                      show_default=True,
                      help="Rounds at most, each the defaults and the configuration in fresh processes, interleaved; "
                           "it stops earlier once the interval is clear of the claim's lower bound.")

DEVICE = click.option("--device", default=None,
                      help="cpu, cuda or cuda:N (default: the export's device where this machine has it, else "
                           "cuda:0 if there is one, else cpu).")


@click.command()
@click.argument("export_file", metavar="EXPORT.json")
@options("verify", ROUNDS, DEVICE, "trial_timeout_s", "quick", "model_args",
         click.option("--json", "as_json", is_flag=True,
                      help="Print the verdict, the measured and claimed speed-ups, the rounds and what changed "
                           "as JSON."))
def verify(export_file: str, rounds: int, device: str | None, trial_timeout: float, quick: bool,
           model_args: tuple[str, ...], as_json: bool) -> None:
    """Measure an exported configuration against its defaults again, on this machine.

    Reads a file written by `autotune export STUDY -o FILE`, measures the defaults and the configuration in
    fresh processes, round by round, and says whether the claimed speed-up holds here ("holds", also when it falls
    short of the claim's lower bound by no more than the noise, and says so), is weaker beyond the noise
    ("weaker: 1.90x (1.80-2.00), claimed 3.08x (2.87-3.31)"), is gone, or could not be told on a busy
    machine ("busy"); and what changed since it was measured (torch, CPU, device, the workload's arguments).
    When the export carries the study's numerics check, it is run again here (an upgrade can change kernels).
    Exits 0 when the claim holds and its numerics still hold, 1 otherwise: a check for CI after upgrading PyTorch.
    --model-arg sets the workload's arguments over the export's.

    \b
    Examples:
      autotune verify best.json
      autotune verify best.json --rounds 6 --json > verified.json
    """
    from autotune.export import verify as verification

    def echo(line: str) -> None:
        if not as_json:
            click.echo(line)

    outcome = verification.run(export_file, rounds=rounds, device=device, quick=quick, trial_timeout=trial_timeout,
                    model_args=dict(parse_model_args(model_args)) or None, echo=echo)
    if as_json:
        click.echo(json.dumps(outcome.to_dict(), indent=2, default=str))
    else:
        for line in outcome.lines():
            click.echo(line)
    if outcome.exit_code:
        sys.exit(outcome.exit_code)


__all__ = ["verify"]

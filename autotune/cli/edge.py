"""The edge of the ``autotune`` command line: the group every command belongs to, where errors become one line.

Typed errors (:mod:`autotune.errors`) become one line on stderr and a non-zero exit here,
and only here; no user error prints a traceback. Every message names its options (a field of the request among
them) as terms, said here in the command line's words (``--trial-timeout``), never by rewriting a message.

The stores a command opened are kept here too: a fault met anywhere is explained by its own store.
"""

from __future__ import annotations

from typing import Any

import click

from autotune.errors import AutotuneError, in_words


def in_cli_words(exc: AutotuneError) -> str:
    """An error's message as the command line says it: each term (an option, a field of the request) in its words."""
    return in_words(exc.said)


class AutotuneGroup(click.Group):
    """Turns AutotuneError (and a storage that refuses to work, wherever it is met) into ``error: ...``
    on stderr and its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except AutotuneError as exc:
            click.echo(f"error: {in_cli_words(exc)}", err=True)
            ctx.exit(exc.exit_code)
        except click.UsageError as exc:  # a bad option value: one line, as for every other bad input
            click.echo(f"error: {exc.format_message()}"
                       + (f" (see autotune {exc.ctx.info_name} --help)" if exc.ctx else ""),
                       err=True)
            ctx.exit(exc.exit_code)
        except (click.exceptions.Exit, click.ClickException, KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:
            fault = _storage_fault(exc)
            if fault is None:
                raise
            click.echo(f"error: {fault}", err=True)
            ctx.exit(fault.exit_code)


STORES: list[Any] = []  # the stores this process opened (one per URL): a fault is explained by its own store


def _storage_fault(exc: BaseException) -> AutotuneError | None:
    for store in STORES:
        fault = store.fault(exc)
        if fault is not None:
            return fault
    return None


def open_store(url: str, read_only: bool = False) -> Any:
    """The command's store (:class:`autotune.store.Store`), opened once; read commands open it read-only."""
    from autotune.store import Store

    store = Store.open(url, read_only=read_only)
    STORES.append(store)
    return store


def study_store(study: str, url: str | None, read_only: bool = False) -> Any:
    """The store of ``--storage``, else the study's default SQLite file (the name checked before any file is
    touched)."""
    from autotune.store import check_name, default_url

    check_name(study)
    return open_store(url or default_url(study), read_only)


@click.group(cls=AutotuneGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="autotune")
def main() -> None:
    """Find the fastest way to run a PyTorch model on this hardware.

    Every performance knob (precision, torch.compile, channels-last, DataLoader
    workers, batch size, ...) is a hyperparameter of an Optuna study; each trial is
    a short, isolated, profiled measurement of the real step.
    """

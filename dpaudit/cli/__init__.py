"""The ``dpaudit`` command line: argument parsing and rendering only.

Every command is one call of a library function plus printing. Errors the library raises on purpose
(:class:`~dpaudit.errors.DPAuditError`) and click's usage errors become one line on stderr and exit
code 2 — never a traceback. A bug (any other exception) exits 70 (``EX_SOFTWARE``), so that no script mistakes
it for a command's own answer (``dpaudit check`` exits 1 for a refuted claim, 3 for an unproven one).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import NoReturn

import click

from dpaudit._version import __version__
from dpaudit.errors import DPAuditError

__all__ = ["cli", "main", "INTERNAL_ERROR"]

#: Exit status of an internal error (a bug): sysexits' EX_SOFTWARE.
INTERNAL_ERROR = 70

# Each module below defines a click command named ``command``; a module that is absent is skipped.
_COMMAND_MODULES = ("account", "train", "attack", "audit", "audit_method", "audit_trainer", "check", "release",
                    "reproduce", "flower", "lm")


class _Threads(click.ParamType):
    """``--threads``: a positive count or ``auto`` (dpaudit.threads)."""

    name = "threads"

    def convert(self, value, param, ctx):
        from dpaudit.threads import parse_threads

        if value is None or isinstance(value, int):
            return value
        try:
            return parse_threads(value, "--threads")
        except DPAuditError as exc:
            self.fail(str(exc), param, ctx)


_THREADS_HELP = ("Intra-op threads of torch and BLAS per process: N, or 'auto' (the cores this process may use divided "
                 "by the workers it runs). Default: $DPAUDIT_THREADS, else 1, which is never slowed by other jobs; "
                 "the same seed gives the same numbers for a given count.")


def _threads_given(ctx: click.Context, param: click.Parameter, value) -> None:
    """``--threads`` after a command's name (``dpaudit audit --threads 1``): applied before the command runs."""
    if value is not None and not ctx.resilient_parsing:
        from dpaudit.threads import apply_threads

        apply_threads(value)


_VERBOSE_HELP = "Also show other libraries' warnings and log lines (Flower, Ray, Opacus, transformers, torch)."


def _verbose_given(ctx: click.Context, param: click.Parameter, value) -> None:
    if value and not ctx.resilient_parsing:
        from dpaudit.cli._warnings import quiet_third_party

        quiet_third_party(True)


def _add_threads_option(cmd: click.Command) -> None:
    """Every command (and sub-command) accepts ``--threads`` and ``--verbose`` too, so they work wherever a user
    types them."""
    if not any(isinstance(p, click.Option) and "--threads" in p.opts for p in cmd.params):
        cmd.params.append(click.Option(["--threads"], type=_Threads(), default=None, metavar="N|auto",
                                       expose_value=False, callback=_threads_given, help=_THREADS_HELP))
    if not any(isinstance(p, click.Option) and "--verbose" in p.opts for p in cmd.params):
        cmd.params.append(click.Option(["--verbose"], is_flag=True, default=False, expose_value=False,
                                       callback=_verbose_given, help=_VERBOSE_HELP))
    for sub in (getattr(cmd, "commands", None) or {}).values():
        _add_threads_option(sub)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="dpaudit")
@click.option("--threads", type=_Threads(), default=None, metavar="N|auto", help=_THREADS_HELP)
@click.option("--verbose", is_flag=True, default=False, help=_VERBOSE_HELP)
def cli(threads: int | str | None, verbose: bool) -> None:
    """dpaudit: what privacy does a released model really have?

    Accounted (theoretical) epsilon beside empirical figures from attacks (each a certified lower bound or an
    estimate, and said to be which).
    """
    from dpaudit.errors import cli_wording
    from dpaudit.threads import apply_threads

    from dpaudit.cli._warnings import quiet_third_party

    click.get_current_context().with_resource(cli_wording())   # errors name flags, not Python keywords
    apply_threads(threads)  # before any tensor work: the commands run after this
    quiet_third_party(verbose)  # other libraries' warnings off the terminal unless --verbose


for _name in _COMMAND_MODULES:
    try:
        _mod = importlib.import_module(f"dpaudit.cli.{_name}")
    except ModuleNotFoundError as exc:  # pragma: no cover - only while a command is not yet written
        if exc.name != f"dpaudit.cli.{_name}":
            raise
        continue
    _cmd = getattr(_mod, "command", None)
    if _cmd is not None:
        _add_threads_option(_cmd)
        cli.add_command(_cmd)


def _fail(message: str, code: int = 2) -> NoReturn:
    from dpaudit._format import printable

    click.echo(f"dpaudit: error: {printable(message)}", err=True)     # a bundle's strings cannot drive the terminal
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script and of ``python -m dpaudit``."""
    try:
        rv = cli.main(args=argv, prog_name="dpaudit", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:  # pragma: no cover - click >= 8.2
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        sys.exit(0)
    except click.UsageError as exc:
        where = f"{exc.ctx.command_path}: " if exc.ctx is not None else ""
        _fail(f"{where}{exc.format_message()}".replace("\n", " "))
    except click.ClickException as exc:
        _fail(exc.format_message().replace("\n", " "), exc.exit_code or 1)
    except click.exceptions.Abort as exc:
        if isinstance(exc.__context__, EOFError):  # click turns an EOFError anywhere into Abort
            _fail(f"unexpected end of input ({exc.__context__})")
        _fail("aborted", 130)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except DPAuditError as exc:
        _fail(str(exc).replace("\n", " "))
    except OSError as exc:  # disk errors: read-only file system, no permission, a file where a directory should be
        _fail(f"{exc.strerror}: {exc.filename}" if exc.filename and exc.strerror else (str(exc) or type(exc).__name__))
    except RecursionError:
        _fail("the input is nested too deeply")
    except MemoryError:
        _fail("out of memory (an input asks for more than this machine has)")
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except Exception as exc:  # a bug: one line by default, the traceback with DPAUDIT_TRACEBACK=1
        if os.environ.get("DPAUDIT_TRACEBACK"):
            raise
        _fail(f"internal error ({type(exc).__name__}: {str(exc)[:300]}); please report it, and set "
              "DPAUDIT_TRACEBACK=1 to see the traceback".replace("\n", " "), INTERNAL_ERROR)
    sys.exit(rv if isinstance(rv, int) else 0)

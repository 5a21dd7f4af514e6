"""``dpaudit audit-method METHOD``: a certified canary audit of a method's whole training run, against the paper's
claim and dpaudit's accounting (:func:`dpaudit.auditing.method_audit.audit_method_run`).

Results go to stdout (a summary, or ``--json``); progress to stderr (``--quiet``: none); ``--out DIR`` writes
``method_audit.json`` atomically.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from dpaudit._io import check_output_folder, dumps_json, make_output_dir, parse_toml_value, write_json
from dpaudit.errors import ParameterError
from dpaudit.progress import as_reporter
from dpaudit.serial import to_dict

__all__ = ["command", "parse_sets"]


def parse_sets(sets: tuple[str, ...]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs (VALUE a TOML value; a bare word is a string) into a dict; a malformed pair is a
    ParameterError naming ``--set``."""
    out: dict[str, Any] = {}
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ParameterError(f"The '--set' option must be KEY=VALUE. Got {item!r} instead.")
        out[key.strip()] = parse_toml_value(value.strip())
    return out


def _parameters_help() -> str:
    from dpaudit.auditing.method_audit import METHOD_RUN_AUDITS, method_run_parameters

    lines = []
    for name in sorted(METHOD_RUN_AUDITS):
        params = ", ".join(sorted(set(method_run_parameters(name)) - {"seed", "confidence"}))
        lines.append(f"{name}: {params}")
    return "\n\n".join(lines)


class _Command(click.Command):
    """The command, its epilog (every method's audit parameters, read from the audit functions' signatures) made
    only when the help is shown: ``dpaudit --help`` and every other command load no audit code."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self.epilog = "Audit parameters (--set KEY=VALUE), by method:\n\n" + _parameters_help()
        super().format_epilog(ctx, formatter)


@click.command("audit-method", cls=_Command)
@click.argument("method", metavar="METHOD")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="One audit parameter, e.g. --set canary_clients=500 (repeatable).")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True)
@click.option("--confidence", type=float, default=0.95, show_default=True, help="Confidence of the certified bound.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory to write method_audit.json into.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--quiet", is_flag=True, help="No progress on stderr (results still go to stdout).")
def command(method: str, sets: tuple[str, ...], seed: int, confidence: float, out: Path | None, as_json: bool,
            quiet: bool) -> None:
    """Certified canary audit of METHOD's whole training run (METHOD: one of the methods listed below) (its real round loop / teacher training / proxy
    training with auditor-planted canaries): a lower bound on its epsilon that holds with the stated confidence,
    beside the paper's claim, dpaudit's accounting and the ideal-attack reference at the same number of trials."""
    from dpaudit.auditing.method_audit import audit_method_run, method_run_parameters

    params = parse_sets(sets)
    method_run_parameters(method)  # an unknown METHOD: one line naming the known ones
    for flag in ("seed", "confidence"):
        if flag in params:
            raise ParameterError(f"The '--set' option cannot set {flag}; use --{flag}. Got --set {flag}=... instead.")
    if out is not None:
        check_output_folder(out)      # a symbolic link is refused before the run, as by every command
    rep = as_reporter(not quiet, prefix="dpaudit audit-method")
    t0 = time.perf_counter()
    result = audit_method_run(method, seed=seed, confidence=confidence, progress=rep, **params)
    if out is not None:
        path = write_json(make_output_dir(out, "method audit") / "method_audit.json", to_dict(result))
        rep.log(f"wrote {path}")
    rep.log(f"done in {time.perf_counter() - t0:.1f} s")
    click.echo(dumps_json(to_dict(result)) if as_json else result.summary())

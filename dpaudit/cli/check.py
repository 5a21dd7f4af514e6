"""``dpaudit check CLAIMS.toml [--junit FILE]``: does every privacy claim hold? (exit 0 yes, 1 no, 2 usage error)"""

from __future__ import annotations

from pathlib import Path

import click

from dpaudit._io import dumps_json
from dpaudit.audit import check_claims, write_junit
from dpaudit.progress import as_reporter


@click.command("check")
@click.argument("claims", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the verdicts as JUnit XML (one testcase per claim) to this file.")
@click.option("--json", "as_json", is_flag=True, help="Print the verdicts as JSON instead of the table.")
@click.option("--quiet", is_flag=True, help="Nothing on stderr (the verdict table still goes to stdout).")
@click.option("--trust-bundle-code", is_flag=True,
              help="Let release claims' attacks run the factory / training function their bundles name (printed to "
                   "stderr first). Without it, only code a claim names itself (factory = / train_fn =) runs.")
@click.pass_context
def command(ctx: click.Context, claims: Path, junit: Path | None, as_json: bool, quiet: bool,
            trust_bundle_code: bool) -> None:
    """Check the privacy claims listed in CLAIMS (a TOML file).

    A claim fails when its accounted epsilon (or delta) exceeds the claimed one, when the subject is accounted
    at another granularity, or when a certified empirical lower bound exceeds the claimed epsilon (a certified
    canary audit of a release, or attack.kind = "method-run": the audit of a method's whole run). Empirical
    estimates (one model's records, not independent trials) never fail a claim: they are reported as warnings.
    Exit status: 0 when every claim holds, 1 when any fails, 2 on usage errors.
    """
    rep = as_reporter(not quiet, prefix="dpaudit check")
    report = check_claims(claims, trust_bundle_code=trust_bundle_code)
    click.echo(dumps_json(report.to_dict()) if as_json else report.table())
    if junit is not None:
        write_junit(report, junit)
        rep.log(f"JUnit XML written to {junit}")
    ctx.exit(report.exit_code)

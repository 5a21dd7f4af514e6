"""``dpaudit check CLAIMS.toml [--junit FILE] [--json]``: does every privacy claim hold?

Exit status: 0 when every claim HOLDS, 1 when any is REFUTED, 3 when none is refuted but some are UNPROVEN,
2 on usage errors (:data:`dpaudit.auditing.evaluate.EXIT_CODES`).
"""

from __future__ import annotations

from pathlib import Path

import click
from rich.text import Text

from dpaudit._format import printable
from dpaudit._io import dumps_json
from dpaudit.cli.render import make_console, print_table, print_warnings
from dpaudit.progress import as_reporter
from dpaudit.serial import to_dict


@click.command("check")
@click.argument("claims", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the verdicts as JUnit XML (one testcase per claim; REFUTED and UNPROVEN claims are "
                   "failures of type PrivacyClaimRefuted / PrivacyClaimUnproven; a claim that could not be evaluated "
                   "is an error of type ClaimNotEvaluated, and the command then exits 2) to this file.")
@click.option("--json", "as_json", is_flag=True, help="Print the verdicts as JSON instead of the table.")
@click.option("--quiet", is_flag=True, help="No progress on stderr (warnings about the claims still go there).")
@click.option("--trust-bundle-code", is_flag=True,
              help="Let release claims' attacks run the factory / training function their bundles name (printed to "
                   "stderr first). Without it, only code a claim names itself (factory = / train_fn =) runs.")
@click.pass_context
def command(ctx: click.Context, claims: Path, junit: Path | None, as_json: bool, quiet: bool,
            trust_bundle_code: bool) -> None:
    """Check the privacy claims listed in CLAIMS (a TOML file); each gets one of three verdicts.

    \b
    REFUTED   certified evidence is above the claimed epsilon: a certified canary audit of a release, or
              attack.kind = "method-run" (the audit of a method's whole run). The claim is false.
    UNPROVEN  no certified evidence against the claim, but the accounting cannot show it: the accounted
              epsilon (or delta) is above the claimed one, or the subject is accounted at another
              granularity. The claim may be true; dpaudit cannot support it.
    HOLDS     the accounting shows the claim and nothing certified contradicts it.

    Empirical estimates (one model's records, not independent trials) never fail a claim: they are reported as
    warnings. Exit status: 0 when every claim holds, 1 when any is refuted, 3 when some are unproven and none is
    refuted, 2 on usage errors.
    """
    from dpaudit.api import check                 # here, not at the top: ``--help`` loads no accountant or attack
    from dpaudit.auditing.evaluate import HOLDS, VERDICT_MEANINGS, VERDICTS, ClaimsIncomplete

    rep = as_reporter(not quiet, prefix="dpaudit check")
    incomplete: ClaimsIncomplete | None = None
    try:
        report = check(claims, junit=junit, progress=rep, trust_bundle_code=trust_bundle_code)
    except ClaimsIncomplete as exc:  # the verdicts of the claims that were evaluated, then the error (exit 2)
        report, incomplete = exc.report, exc
    if as_json:
        click.echo(dumps_json(to_dict(report)))
    else:
        console = make_console()
        print_table(console, list(report.TABLE_HEAD), report.rows())
        console.print(Text(printable(report.summary()), style="bold"), soft_wrap=True)
        for v in VERDICTS:
            if v != HOLDS and report.counts[v]:
                console.print(Text(f"{v}: {VERDICT_MEANINGS[v]}."), soft_wrap=True)
        for line in report.audit_lines():
            console.print(Text(printable(line)), soft_wrap=True)
    for r in report.results:
        print_warnings(r.warnings, where=f" ({r.name})")
    if junit is not None:
        rep.log(f"JUnit XML written to {junit}")
    if incomplete is not None:
        raise incomplete
    ctx.exit(report.exit_code)

"""The report page in a real headless browser: it renders (a screenshot of the first screen is written) and the
browser logs no console error. Skipped, not failed, where no chromium is installed (CI and ``run.sh`` do not
need one; on Debian: ``apt-get install chromium``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from dpaudit.report.flags import compute_flags
from dpaudit.report.render import write_report
from dpaudit.report.schema import AuditReport
from dpaudit.report.verdict import compute_verdicts

# the test module beside this one builds its typed fixtures; reuse them rather than a second copy
from test_report import _attack, _model, _theory  # noqa: E402

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


@pytest.mark.slow  # 3-15 s: starts a browser
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (apt-get install chromium)")
def test_report_renders_in_headless_chromium_without_console_errors(tmp_path):
    models = (_model("reference", theoretical=None, noise=None, attacks=(_attack(1.2, 0.7), _attack(0.0, 0.62, name="lira"))),
              _model("gamma=0.1", noise=0.1, attacks=(_attack(), _attack(name="lira"))),
              _model("gamma=1", noise=1.0, theoretical=_theory(900.0), attacks=(_attack(), _attack(name="lira"))))
    rep = AuditReport(title="browser check", seed=0, dataset={"name": "digits"}, models=models,
                      flags=tuple(compute_flags(models)), verdicts=tuple(compute_verdicts(models)))
    out = write_report(rep, tmp_path / "r")
    png = tmp_path / "shot.png"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
           "--enable-logging=stderr", "--v=0", f"--screenshot={png}", "--window-size=1280,2000",
           (out / "report.html").resolve().as_uri()]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90, env={**os.environ, "HOME": str(tmp_path)})
    except subprocess.TimeoutExpired:
        pytest.skip("chromium did not finish within 90 s (machine overloaded)")
    assert png.is_file() and png.stat().st_size > 20_000, proc.stderr[-2000:]
    # page errors are logged as "CONSOLE(...)" lines / "Uncaught" at level ERROR; the page has no script at all
    console = [ln for ln in proc.stderr.splitlines() if re.search(r"CONSOLE|Uncaught|Failed to load resource", ln)]
    assert console == [], console
    keep = os.environ.get("DPAUDIT_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(png, keep)

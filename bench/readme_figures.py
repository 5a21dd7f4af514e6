"""The README's quick-start figures, measured by one script: the default test suite (how many tests, how long) and
the default audit (``dpaudit audit``), with the date and the machine they were measured on; optionally a fresh
clone's first ``bash run.sh audit`` and ``bash .ci/run`` (installs included; needs the package index).

    python bench/readme_figures.py                      # the suite and the default audit in this environment
    python bench/readme_figures.py --fresh-clone        # also: git clone, bash run.sh audit, bash .ci/run (installs)
    python bench/readme_figures.py --skip-tests         # the default audit only

Prints one JSON line per measurement and, at the end, the README sentence with every figure, its date and machine.
Timings depend on the machine's load: the load average is recorded beside them; quote figures from a quiet machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def machine() -> dict:
    """Where the figures were measured: date (UTC), OS, CPU, cores, memory, load average, Python, commit."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    except OSError:
        pass
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        mem = float("nan")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"), "os": platform.platform(terse=True),
            "cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem, 1),
            "load_average": [round(x, 2) for x in os.getloadavg()], "python": platform.python_version(),
            "commit": commit or "unknown"}


def _timed(cmd: list[str], cwd: Path, env: dict | None = None, timeout: int = 7200) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    secs = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return secs, proc.stdout + proc.stderr


def suite_figures(cmd: list[str], cwd: Path, env: dict | None = None) -> dict:
    """Run the default test suite: tests passed, pytest's own time and the wall time."""
    secs, out = _timed(cmd, cwd, env)
    summary = next((ln for ln in reversed(out.splitlines()) if " passed" in ln), "")
    passed = int(re.search(r"(\d+) passed", summary).group(1)) if " passed" in summary else 0
    m = re.search(r" in ([\d.]+)s", summary)
    return {"tests": passed, "pytest_s": float(m.group(1)) if m else None, "wall_s": round(secs, 1), "summary": summary.strip("= ")}


def audit_figures(python: str, cwd: Path) -> dict:
    """The default audit (``dpaudit audit`` on the embedded default), in a scratch folder."""
    with tempfile.TemporaryDirectory() as tmp:
        secs, _ = _timed([python, "-m", "dpaudit", "audit", "--out", str(Path(tmp) / "audit"), "--quiet"], cwd)
    return {"audit_s": round(secs, 1)}


def fresh_clone_figures() -> dict:
    """A fresh clone's first ``bash run.sh audit`` (install + audit) and ``bash .ci/run`` (the suite)."""
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "dpaudit"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        first, out = _timed(["bash", "run.sh", "audit", "--quiet"], clone, env)
        installed = re.search(r"installed in (\d+) s", out)
        install_s = float(installed.group(1)) if installed else None
        ci = suite_figures(["bash", ".ci/run"], clone, env)
        shutil.rmtree(clone, ignore_errors=True)
    return {"first_run_audit_s": round(first, 1), "install_s": install_s,
            "audit_after_install_s": None if install_s is None else round(first - install_s, 1),
            "ci_tests": ci["tests"], "ci_wall_s": ci["wall_s"], "ci_pytest_s": ci["pytest_s"]}


def sentence(fig: dict) -> str:
    m = fig["machine"]
    where = (f"measured {m['date']} on {m['cores']} cores ({m['cpu']}, {m['os']}, load average "
             f"{m['load_average'][0]:g}) by `python bench/readme_figures.py`")
    parts = []
    if "install_s" in fig:
        parts.append(f"the first `bash run.sh audit` of a fresh clone spends {fig['install_s']:g} s installing and "
                     f"{fig['audit_after_install_s']:g} s auditing; `bash .ci/run` runs {fig['ci_tests']:,} tests in "
                     f"{fig['ci_wall_s']:g} s")
    if "audit_s" in fig:
        parts.append(f"the default audit takes {fig['audit_s']:g} s")
    if "tests" in fig:
        parts.append(f"the default suite runs {fig['tests']:,} tests in {fig['wall_s']:g} s ({fig['pytest_s']:g} s in pytest)")
    return "; ".join(parts) + f" ({where})."


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fresh-clone", action="store_true", help="also time a fresh clone's install, audit and CI run")
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--skip-audit", action="store_true")
    ap.add_argument("--out", type=Path, default=None, help="also write the figures as JSON here")
    a = ap.parse_args(argv)
    fig: dict = {"machine": machine()}
    print(json.dumps(fig["machine"]), flush=True)
    if not a.skip_audit:
        fig.update(audit_figures(sys.executable, ROOT))
        print(json.dumps({"audit_s": fig["audit_s"]}), flush=True)
    if not a.skip_tests:
        fig.update(suite_figures([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], ROOT))
        print(json.dumps({k: fig[k] for k in ("tests", "pytest_s", "wall_s")}), flush=True)
    if a.fresh_clone:
        fig.update(fresh_clone_figures())
        print(json.dumps({k: fig[k] for k in ("install_s", "first_run_audit_s", "ci_tests", "ci_wall_s")}), flush=True)
    fig["machine"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    text = sentence(fig)
    print(text)
    if a.out is not None:
        a.out.write_text(json.dumps({**fig, "readme": text}, indent=2) + "\n")
    return fig


if __name__ == "__main__":
    main()

"""Where the default audit's time goes: ``dpaudit audit`` (the embedded default) under cProfile, by stage.

    python bench/profile_audit.py [--out runs/bench/audit-profile] [--profile FILE.prof]

Runs the default audit into ``--out`` (fresh) in this process (``--executor local``) under :mod:`cProfile` (or, with ``--profile``, reads a profile made
earlier: ``python -m cProfile -o FILE.prof -m dpaudit audit --out DIR``) and prints each stage's cumulative time and
share (training the releases, the attack units, the certified canary audit, the FREDY whole-run audit, the report),
then the operators where the time is spent. Times are wall-clock seconds inside the process (cProfile adds its own
overhead to Python-heavy code); on a shared machine only the shares are meaningful, so the load average is printed.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: (stage, function name, file suffix): the runner's stages and what they spend their time on.
STAGES = [
    ("whole audit (run_audit)", "_run_audit", "auditing/runner.py"),
    ("train the releases (3 FREDY runs + baseline)", "_train", "auditing/runner.py"),
    ("attacks: 3 kinds x 4 releases", "_attack_unit", "auditing/runner.py"),
    ("  of which shadow-model attack", "shadow_attack", "attacks/shadow.py"),
    ("  of which LiRA", "lira_attack", "attacks/lira.py"),
    ("certified canary audit (one-run, white-box)", "_canary_audit", "auditing/runner.py"),
    ("FREDY whole-run audit", "_method_audit", "auditing/runner.py"),
    ("report (Markdown, HTML, JSON, figures)", "write_report", "report/render.py"),
    ("  of which matplotlib savefig", "savefig", "matplotlib/figure.py"),
    ("every train_ensemble call", "train_ensemble", "training/ensemble.py"),
    ("  of which the optimizer (stacked Adam / SGD)", "update", "training/optim.py"),
    ("imports (cumulative, nested)", "_find_and_load", "<frozen importlib._bootstrap>"),
]


def stage_table(stats: pstats.Stats) -> list[tuple[str, float]]:
    st = stats.stats  # type: ignore[attr-defined]
    rows = []
    for label, name, suffix in STAGES:
        cum = max((v[3] for (f, _, n), v in st.items() if n == name and f.endswith(suffix)), default=0.0)
        rows.append((label, cum))
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/bench/audit-profile"))
    ap.add_argument("--profile", type=Path, default=None, help="read this profile instead of running the audit")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args(argv)
    load = os.getloadavg()
    if args.profile is None:
        from dpaudit.cli import main as dpaudit_main

        shutil.rmtree(args.out, ignore_errors=True)
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        try:
            # in this process (--executor local): cProfile sees only the process it runs in, and the default
            # (--executor auto) runs the units in worker processes where more than one core is usable
            prof.runcall(dpaudit_main, ["audit", "--out", str(args.out), "--quiet", "--executor", "local"])
        except SystemExit:
            pass
        print(f"default audit: {time.perf_counter() - t0:.1f} s wall under cProfile")
        stats = pstats.Stats(prof)
    else:
        stats = pstats.Stats(str(args.profile))
    rows = stage_table(stats)
    total = rows[0][1] or 1.0
    when = "at start" if args.profile is None else "now (the profile was made earlier: its load is not known here)"
    print(f"load average {when} (1, 5, 15 min): {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores")
    print(f"{'stage':<50} {'seconds':>9} {'share':>6}")
    for label, cum in rows:
        print(f"{label:<50} {cum:9.1f} {cum / total:6.1%}")
    print(f"\nthe {args.top} functions with the most own time:")
    own = sorted(((v[2], f, n, v[1]) for (f, _, n), v in stats.stats.items()), reverse=True)[: args.top]  # type: ignore[attr-defined]
    for t, f, n, calls in own:
        print(f"  {t:8.1f} s {t / total:6.1%}  {calls:7d} calls  {n}  ({Path(f).name})")


if __name__ == "__main__":
    main()

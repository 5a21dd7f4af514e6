"""Compare the numbers of two audit reports (``report.json``): every figure equal, or the ones that differ.

    python bench/compare_reports.py reports/default/report.json RUN/report.json

Walks both JSON trees in step and compares every number (and every string that is not a path, a time or a
version) exactly; keys that describe the run rather than its results (``elapsed_seconds``, ``settings``,
``created_by``, paths) are skipped. Prints the count compared and each difference; exit 1 when any differs.
Used for issue 37's rule: a speed change keeps every figure of the committed default report equal.
"""

from __future__ import annotations

import json
import sys
from typing import Any

SKIP = {"elapsed_seconds", "settings", "created_by", "release", "path", "out", "data_dir", "bundle", "stage"}


def walk(a: Any, b: Any, where: str, out: dict) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k in SKIP:
                continue
            if k not in a or k not in b:
                out["diff"].append(f"{where}/{k}: only in {'first' if k in a else 'second'}")
                continue
            walk(a[k], b[k], f"{where}/{k}", out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out["diff"].append(f"{where}: lengths {len(a)} and {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            walk(x, y, f"{where}[{i}]", out)
    else:
        if isinstance(a, (int, float)) and not isinstance(a, bool):
            out["numbers"] += 1
        if a != b:
            out["diff"].append(f"{where}: {a!r} != {b!r}")


def compare(first: str, second: str) -> dict:
    with open(first, encoding="utf-8") as f1, open(second, encoding="utf-8") as f2:
        out: dict = {"numbers": 0, "diff": []}
        walk(json.load(f1), json.load(f2), "", out)
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    res = compare(*args)
    for line in res["diff"]:
        print(line)
    print(f"{res['numbers']} numbers compared, {len(res['diff'])} differences")
    return 1 if res["diff"] else 0


if __name__ == "__main__":
    sys.exit(main())

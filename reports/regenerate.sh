#!/usr/bin/env bash
# Regenerate the committed example reports from scratch (same seeds: the numbers come out identical; only the run
# times change). Each audit runs into runs/reports/NAME (git-ignored: releases, caches) and its report files and
# figures are copied here.   Usage: bash reports/regenerate.sh [NAME ...]   (default: all)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
dpaudit="${DPAUDIT:-$here/.venv/bin/dpaudit}"
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(default pate fedkt privatekt proxyfl reproduce)
for name in "${names[@]}"; do
    work="runs/reports/$name"
    rm -rf "$work"
    if [ "$name" = reproduce ]; then
        for paper in privatekt fedkt fredy proxyfl; do
            "$dpaudit" reproduce "$paper" --scale cpu --quiet --out "reports/reproduce/$paper" --work-dir "$work/$paper"
        done
        continue
    fi
    if [ "$name" = default ]; then
        "$dpaudit" audit --quiet --out "$work" > /dev/null
    else
        "$dpaudit" audit "configs/audit_$name.toml" --quiet --out "$work" > /dev/null
    fi
    rm -rf "reports/$name"
    mkdir -p "reports/$name"
    cp "$work"/report.json "$work"/report.md "$work"/report.html "$work"/*.png "reports/$name/"
    echo "reports/$name: regenerated"
done

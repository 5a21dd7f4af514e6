#!/usr/bin/env bash
# Regenerate the committed attack comparisons (issue 25): the reference-count sweeps (digits and mnist1d MLPs) and one
# comparison table per release of the four methods' students (small CPU configs on digits), each with its per-record
# report. Same seeds, same numbers; only the run times change. Scratch (releases, unit checkpoints) goes to runs/.
#   Usage: bash reports/attacks/regenerate.sh [sweep] [students]      (default: both; the sweeps take the longest)
#   STUDENTS="privatekt proxyfl" bash reports/attacks/regenerate.sh students     (some students only)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$here"
py="${PYTHON:-$here/.venv/bin/python}"
dpaudit="${DPAUDIT:-$here/.venv/bin/dpaudit}"
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(sweep students)
students=(${STUDENTS:-fedkt fredy privatekt proxyfl})
for part in "${parts[@]}"; do
    if [ "$part" = sweep ]; then
        for ds in digits mnist1d; do
            "$py" bench/bench_reference_sweep.py --dataset "$ds" --out reports/attacks
        done
    elif [ "$part" = students ]; then
        for m in "${students[@]}"; do
            # FedKT and FREDY: their small CPU configs on digits; PrivateKT and ProxyFL: the methods' CPU defaults (their
            # configs/*.toml are the papers' MNIST settings), as configs/audit_*.toml use them
            cfg=()
            [ -f "configs/$m.toml" ] && grep -q '^name = "digits"' "configs/$m.toml" && cfg=(--config "configs/$m.toml")
            rm -rf "runs/students/$m" "runs/students/.$m.checkpoints" "reports/attacks/$m"
            "$dpaudit" train "$m" --dataset digits "${cfg[@]}" --out "runs/students/$m" --quiet > /dev/null
            "$dpaudit" attack "runs/students/$m" --compare --shadows 16 --per-record --seed 0 --quiet \
                --out "runs/students/$m/compare" > /dev/null
            mkdir -p "reports/attacks/$m"
            cp runs/students/"$m"/compare/*.md runs/students/"$m"/compare/*.json runs/students/"$m"/compare/*.csv \
                runs/students/"$m"/compare/*.png "reports/attacks/$m/"
            echo "reports/attacks/$m: regenerated"
        done
    fi
done

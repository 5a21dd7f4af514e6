#!/usr/bin/env bash
# dpaudit bootstrap: creates .venv, installs dpaudit with what it needs, then runs a job.
#   bash run.sh audit [ARGS...]   run the main job (dpaudit audit on the embedded default data set)
#   bash run.sh test  [ARGS...]   run the test suite (default run; slow tests: bash run.sh test -m slow)
#   bash run.sh dpaudit ARGS...   any dpaudit command inside the environment
# On a machine without an NVIDIA GPU, the CPU build of torch is installed first, so that pip never
# pulls the multi-GB CUDA build.
# Every install step prints one line to stderr saying what it installs, and the total time at the end;
# the job's own output follows unchanged.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
venv="${DPAUDIT_VENV:-$here/.venv}"
python="${PYTHON:-python3}"
stamp="$venv/.dpaudit-installed"
t_start=$SECONDS
step() { echo "[run.sh] $*" >&2; }

if [ ! -x "$venv/bin/python" ]; then
    step "creating the virtual environment $venv ($("$python" --version 2>&1))"
    "$python" -m venv "$venv"
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    step "installing dpaudit and its dependencies into $venv (first run only; a few minutes on a slow network)"
    step "upgrading pip"
    "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
    if ! "$venv/bin/python" -c "import torch" >/dev/null 2>&1; then
        if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
            step "installing torch (CUDA build: an NVIDIA GPU is present)"
            "$venv/bin/python" -m pip install -q torch
        else
            # a CPU wheel already on the machine (pip's find-links) first, then PyTorch's CPU-only index
            if "$venv/bin/python" -m pip install -q --no-index --no-deps "torch==2.13.0" 2>/dev/null; then
                step "installing torch 2.13.0 (CPU build found on this machine) and its small dependencies"
                "$venv/bin/python" -m pip install -q "torch==2.13.0"   # its small dependencies
            else
                step "installing torch (CPU-only build from download.pytorch.org: no NVIDIA GPU here)"
                "$venv/bin/python" -m pip install -q torch --index-url https://download.pytorch.org/whl/cpu
            fi
        fi
    fi
    deps="$("$venv/bin/python" - <<'PY' 2>/dev/null || echo "its dependencies (pyproject.toml)"
try:
    import tomllib
except ImportError:
    raise SystemExit(1)
import re
with open("pyproject.toml", "rb") as f:
    p = tomllib.load(f)["project"]
names = [re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0] for d in p["dependencies"] + p.get("optional-dependencies", {}).get("test", [])]
print(", ".join(n for n in names if n != "torch"))
PY
)"
    step "installing dpaudit (editable) with $deps"
    "$venv/bin/python" -m pip install -q -e ".[test]"
    touch "$stamp"
    step "installed in $((SECONDS - t_start)) s"
fi

cmd="${1:-audit}"
[ $# -gt 0 ] && shift
case "$cmd" in
    audit) exec "$venv/bin/dpaudit" audit "$@" ;;
    test)  exec "$venv/bin/python" -m pytest "$@" ;;
    dpaudit) exec "$venv/bin/dpaudit" "$@" ;;
    *) echo "usage: bash run.sh audit|test|dpaudit [ARGS...]" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# dpaudit bootstrap: creates .venv, installs dpaudit with what it needs, then runs a job.
#   bash run.sh audit [ARGS...]   run the main job (dpaudit audit on the embedded default data set)
#   bash run.sh test  [ARGS...]   run the test suite in parallel (pytest-xdist; -n N or -p no:xdist to choose;
#                                 slow tests: bash run.sh test -m slow)
#   bash run.sh dpaudit ARGS...   any dpaudit command inside the environment
#   bash run.sh docs  [ARGS...]   build the documentation site into site/ (mkdocs build --strict: warnings fail)
# On a machine without an NVIDIA GPU, the CPU build of torch is installed first, so that pip never
# pulls the multi-GB CUDA build.
# Every install step prints one line to stderr saying what it installs, and the total time at the end;
# pip's own output goes to $venv/.dpaudit-pip.log and is shown only when an install fails. The job's own
# output follows unchanged.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
venv="${DPAUDIT_VENV:-$here/.venv}"
python="${PYTHON:-python3}"
stamp="$venv/.dpaudit-installed"
t_start=$SECONDS
step() { echo "[run.sh] $*" >&2; }
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
pip_log="$venv/.dpaudit-pip.log"
# pip ARGS...: quiet; its output is appended to $pip_log, and on failure shown on stderr before the script stops
pip_quiet() {
    if ! "$venv/bin/python" -m pip "$@" >>"$pip_log" 2>&1; then
        step "pip $* failed; its output (the whole log: $pip_log):"
        tail -n 200 "$pip_log" >&2
        exit 1
    fi
}

if [ ! -x "$venv/bin/python" ]; then
    step "creating the virtual environment $venv ($("$python" --version 2>&1))"
    "$python" -m venv "$venv"
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    : >"$pip_log"
    step "installing dpaudit and its dependencies into $venv (first run only; a few minutes on a slow network)"
    step "upgrading pip"
    "$venv/bin/python" -m pip install -q --upgrade pip >>"$pip_log" 2>&1 || true   # an old pip still works
    if ! "$venv/bin/python" -c "import torch" >/dev/null 2>&1; then
        if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
            step "installing torch (CUDA build: an NVIDIA GPU is present)"
            pip_quiet install -q torch
        else
            # a CPU wheel already on the machine (pip's find-links) first, then PyTorch's CPU-only index
            if "$venv/bin/python" -m pip install -q --no-index --no-deps "torch==2.13.0" >>"$pip_log" 2>&1; then
                step "installing torch 2.13.0 (CPU build found on this machine) and its small dependencies"
                pip_quiet install -q "torch==2.13.0"   # its small dependencies
            else
                step "installing torch (CPU-only build from download.pytorch.org: no NVIDIA GPU here)"
                pip_quiet install -q torch --index-url https://download.pytorch.org/whl/cpu
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
extras = p.get("optional-dependencies", {})
# the test extra's own packages, then those of the extras it pulls in (dpaudit[docs,flower,lm])
pulled = [e for d in extras.get("test", []) if d.startswith("dpaudit[") for e in d[8:].split("]")[0].split(",")]
reqs = p["dependencies"] + extras.get("test", []) + [d for e in pulled for d in extras.get(e.strip(), [])]
names = [re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0] for d in reqs]
print(", ".join(n for n in names if n not in ("torch", "dpaudit")))
PY
)"
    step "installing dpaudit (editable) with $deps"
    pip_quiet install -q -e ".[test]"
    touch "$stamp"
    step "installed in $((SECONDS - t_start)) s"
fi

cmd="${1:-audit}"
[ $# -gt 0 ] && shift
case "$cmd" in
    audit) exec "$venv/bin/dpaudit" audit "$@" ;;
    test)
        # in parallel (pytest-xdist), one worker per usable core up to 8, unless the arguments choose (-n N,
        # --numprocesses, -p no:xdist) or only one core is usable
        xdist=()
        cores="$("$venv/bin/python" -c 'import os; print(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)' 2>/dev/null || true)"
        case "$cores" in ''|*[!0-9]*) cores=1 ;; esac
        case " $* " in
            *" -n"*|*" --numprocesses"*|*" -p no:xdist "*|*" -pno:xdist "*) ;;
            *) if [ "$cores" -gt 1 ] && "$venv/bin/python" -c "import xdist" >/dev/null 2>&1; then
                   xdist=(-n "$(( cores < 8 ? cores : 8 ))"); fi ;;
        esac
        # work stealing: a worker that runs dry takes queued tests from the other, so the run does not end with one
        # worker finishing a long tail alone (unless the arguments choose --dist)
        case " $* " in *" --dist"*|*" -d "*) ;; *) [ ${#xdist[@]} -gt 0 ] && xdist+=(--dist worksteal) ;; esac
        exec "$venv/bin/python" -m pytest "${xdist[@]}" "$@" ;;
    dpaudit) exec "$venv/bin/dpaudit" "$@" ;;
    docs)  exec "$venv/bin/python" -m mkdocs build --strict --config-file mkdocs.yml --site-dir site "$@" ;;
    *) echo "usage: bash run.sh audit|test|dpaudit|docs [ARGS...]" >&2; exit 2 ;;
esac

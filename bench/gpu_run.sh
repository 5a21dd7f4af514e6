#!/usr/bin/env bash
# The GPU run of the ensemble and DP-SGD benchmarks, as one short script (about 3-5 minutes on one H100/H200, at most
# 7.5: every step has its own time limit, and each bench writes its JSON after every case, so a step cut short
# keeps what it finished):
#   bash bench/gpu_run.sh OUT_DIR            # CUDA sizes; JSON results and a log under OUT_DIR
#   bash bench/gpu_run.sh OUT_DIR --quick    # tiny sizes on whatever device there is (a CPU check of the script)
# PYTHON picks the interpreter (default: python3, with this checkout first on PYTHONPATH).
#
# What runs (each bench prints its table; the JSON has the device name, torch / opacus versions, load average):
#   bench_ensemble.py  100 MLP teachers, 20 epochs, ensemble trainer vs a plain per-model loop (the README's CPU case)
#   bench_dpsgd.py     the README's DP-SGD cases (64 and 256 MLPs, 64 CNNs, no-DP 64 MLPs) against real Opacus one
#                      model at a time, then GPU sizes (1024 MLPs, 512 CNNs) whose Opacus baseline is timed on 64
#                      models and scaled (it is a sequential loop over models)
#   bench_lm_logprobs.py  the LM log-probability pass (batch size chosen from the measured rate) against a
#                      per-sequence loop (timed on 500 texts, scaled) and sorted padded-batch loops, on a GPT-2 of
#                      124M parameters built from its config (12 layers, 768 wide, 12 heads) and 20,000 short texts
set -uo pipefail
out="${1:?usage: bash bench/gpu_run.sh OUT_DIR [--quick]}"
mode="${2:-}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
py="${PYTHON:-python3}"
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$out"
log="$out/gpu_run.log"
t0=$SECONDS
status=0

run() {  # run LIMIT_SECONDS NAME ARGS...: one step, its output to the terminal and the log
    local limit="$1" name="$2"
    shift 2
    echo "== $name (limit ${limit}s, at $((SECONDS - t0)) s)" | tee -a "$log"
    if ! timeout "$limit" "$@" 2>&1 | tee -a "$log"; then
        echo "!! $name failed or ran out of time" | tee -a "$log"
        status=1
    fi
}

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host: $(uname -a)"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "nvidia-smi: not available"
    "$py" -c "import torch, opacus; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu'); print('opacus', opacus.__version__)"
} > "$out/environment.txt" 2>&1
cat "$out/environment.txt" | tee -a "$log"

if [ "$mode" = "--quick" ]; then
    run 300 "ensemble (quick)" "$py" bench/bench_ensemble.py --quick --out "$out/ensemble_quick.json"
    run 300 "dp-sgd (quick)" "$py" bench/bench_dpsgd.py --quick --out "$out/dpsgd_quick.json"
    run 300 "dp-sgd, scaled baseline (quick)" "$py" bench/bench_dpsgd.py --quick --cases quick-dp-mlp \
        --baseline-models 2 --warm 1 --out "$out/dpsgd_quick_scaled.json"
    run 300 "lm log-prob pass (quick)" "$py" bench/bench_lm_logprobs.py --texts 200 --repeats 1 --loop-texts 50 \
        --out "$out/lm_logprobs_quick.json"
else
    run 90 "ensemble: 100 teachers" "$py" bench/bench_ensemble.py --models 100 --epochs 20 --repeats 2 \
        --device cuda --out "$out/ensemble_100.json"
    run 240 "dp-sgd: the README's cases" "$py" bench/bench_dpsgd.py --device cuda --warm 1 \
        --cases dp-mlp-64 dp-mlp-256 dp-cnn-64 nodp-mlp-64 --out "$out/dpsgd_cpu_cases.json"
    run 120 "dp-sgd: GPU sizes (baseline on 64 models, scaled)" "$py" bench/bench_dpsgd.py --device cuda --warm 1 \
        --cases dp-mlp-1024 dp-cnn-512 --baseline-models 64 --out "$out/dpsgd_gpu_sizes.json"
    run 150 "lm log-prob pass: GPT-2 124M, 20,000 texts" "$py" bench/bench_lm_logprobs.py --device cuda \
        --texts 20000 --repeats 2 --loop-texts 500 --n-embd 768 --n-layer 12 --n-head 12 \
        --sorted-batches 32 64 128 256 --out "$out/lm_logprobs_gpt2.json"
fi
echo "gpu_run.sh: done in $((SECONDS - t0)) s; results in $out (status $status)" | tee -a "$log"
exit $status

#!/usr/bin/env python
"""Why plain ensembles stop near 4x a per-model loop on one CPU thread: a compute ceiling, measured in one process.

``python bench/bench_ensemble_ceiling.py`` (bench_dpsgd.py's non-DP row: 64 MLPs 64-100-100-10, batch 32, SGD, one thread). It prints one model's training-step FLOPs (forward and backward: three matmuls' worth per layer), the
single-thread matmul rate (512^3) and the batched-matmul rate at the ensemble's own shapes (forward bmm only), the
per-model loop's achieved rate, and the rate the whole ensemble step would have to sustain to be 3.8x and 7x the loop.
When that rate is the forward bmm's own rate at these shapes (or above), no batching of the same arithmetic reaches it:
the backward's transposed products, the loss, the gathers and Adam all take time on top. Ratios only: on a shared
machine the absolute rates fall with the load (printed)."""
import sys, time, math
sys.path.insert(0, '.')
import torch
torch.set_num_threads(1)
M, B, dims = 64, 32, [64, 100, 100, 10]   # bench_dpsgd.py's non-DP row: 64 MLPs, batch 32, SGD
# forward MACs per model per step, x3 for forward + backward (two matmuls in backward per layer)
macs = sum(B * a * b for a, b in zip(dims[:-1], dims[1:]))
flop_step = 2 * 3 * macs
a = torch.randn(512, 512); b = torch.randn(512, 512)
for _ in range(3): a @ b
t = time.perf_counter(); n = 20
for _ in range(n): a @ b
peak = 2 * 512**3 * n / (time.perf_counter() - t)
# bmm at the ensemble's shapes: (M, B, 64) x (M, 64, 100) etc.
xs = [torch.randn(M, B, d) for d in dims[:-1]]; ws = [torch.randn(M, d, e) for d, e in zip(dims[:-1], dims[1:])]
for _ in range(3): [torch.bmm(x, w) for x, w in zip(xs, ws)]
t = time.perf_counter(); n = 50
for _ in range(n): [torch.bmm(x, w) for x, w in zip(xs, ws)]
bmm_rate = 2 * M * macs * n / (time.perf_counter() - t)
# one model's plain step (torch.nn + Adam), as the bench's loop arm
m = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 100), torch.nn.ReLU(), torch.nn.Linear(100, 100), torch.nn.ReLU(), torch.nn.Linear(100, 10))
opt = torch.optim.SGD(m.parameters(), lr=0.05)
x = torch.randn(B, 64); y = torch.randint(0, 10, (B,))
def step():
    opt.zero_grad(); torch.nn.functional.cross_entropy(m(x), y).backward(); opt.step()
for _ in range(20): step()
t = time.perf_counter(); n = 300
for _ in range(n): step()
loop_step = (time.perf_counter() - t) / n
print(f"one model's step: {flop_step/1e6:.2f} MFLOP; single-thread matmul 512^3: {peak/1e9:.1f} GFLOP/s; "
      f"bmm at the ensemble's shapes (forward only): {bmm_rate/1e9:.1f} GFLOP/s")
print(f"per-model loop: {loop_step*1e3:.3f} ms per model-step = {flop_step/loop_step/1e9:.1f} GFLOP/s "
      f"({flop_step/loop_step/peak:.0%} of the matmul peak)")
for target in (3.8, 7.0):
    need = flop_step / (loop_step / target)
    print(f"  {target}x the loop needs {need/1e9:.1f} GFLOP/s sustained over the whole step ({need/peak:.0%} of the "
          f"512^3 matmul peak, {need/bmm_rate:.0%} of the bmm rate at these shapes, forward bmm alone)")
import os; print("load average (1, 5, 15 min):", os.getloadavg(), "on", os.cpu_count(), "cores")

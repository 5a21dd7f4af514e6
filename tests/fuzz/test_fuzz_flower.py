"""Issue 44, item 4: a property test of Flower run directories (``flower_run.json`` from someone else) under CPU-time
and memory limits. Each case starts from a valid record and draws hostile numbers and shapes for it: noise
multipliers anywhere in the float range (5e-324 to 1e300, per round), declared sample sizes and lost replies,
adaptive clipping's count noise, local DP settings, Flower's own recorded figure (401-digit integers, strings),
unequal weights, populations that change, deltas from 1e-300 to 0.5, both relations. The rule: reading and
accounting the directory returns within 20 s of CPU time and 1.5 GiB of address space more than the process had,
or raises one of dpaudit's errors; a figure it returns is sound where it can be checked (never NaN, the certified
lower bound at or below the amplified upper bound, every client's figure the smaller of its two).

12 derandomised cases in the default run, 2,000 random ones under ``-m slow``."""

from __future__ import annotations

import contextlib
import json
import math
import resource
import signal
import tempfile
from pathlib import Path

from hypothesis import strategies as st

from fuzz_helpers import fuzz
from dpaudit.errors import DPAuditError

CPU_S = 20
EXTRA_AS = 3 << 29     # 1.5 GiB


@contextlib.contextmanager
def limits(what):
    """Fail (not hang, not take the machine) when one case takes more than CPU_S of CPU time or EXTRA_AS bytes of
    address space more than the process holds now."""
    def over(*_):
        raise AssertionError(f"more than {CPU_S} s of CPU time for {what!r:.300}")

    old_handler = signal.signal(signal.SIGPROF, over)
    signal.setitimer(signal.ITIMER_PROF, CPU_S)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as fh:
        vm = int(fh.read().split()[0]) * resource.getpagesize()
    cap = vm + EXTRA_AS if hard == resource.RLIM_INFINITY else min(vm + EXTRA_AS, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    except MemoryError:
        raise AssertionError(f"more than {EXTRA_AS >> 20} MiB of address space for {what!r:.300}") from None
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old_handler)


SIGMAS = st.one_of(st.sampled_from([5e-324, 1e-300, 1e-200, 1e-6, 0.01, 0.05, 0.3, 1.0, 2.0, 1e6, 1e300, 0.0]),
                   st.floats(1e-3, 50.0))
NUMBERS = st.one_of(st.sampled_from([0, 1, -1, 10 ** 400, 1e308, 5e-324, "1e5", None, True, [1], math.inf]),
                    st.floats(0.0, 1e3))


@st.composite
def flower_records(draw) -> tuple[dict, float, str]:
    n = draw(st.integers(2, 30))
    m = draw(st.integers(1, n))
    rounds = draw(st.integers(1, 12))
    kind = draw(st.sampled_from(["server-fixed", "client-fixed", "server-adaptive", "client-adaptive", "none",
                                 "unknown"]))
    per_round = draw(st.booleans())
    sigma0 = draw(SIGMAS)
    declared = draw(st.one_of(st.just(m), st.integers(1, 2 * n)))
    rng_seed = draw(st.integers(0, 2 ** 16))
    import numpy as np

    rng = np.random.default_rng(rng_seed)
    grow = draw(st.booleans())
    lose = draw(st.sampled_from([0, 0, 1, m]))
    recs = []
    for t in range(1, rounds + 1):
        size = n - (rounds - t) % 2 if grow else n
        pop = list(range(1000, 1000 + max(size, m)))
        s = [int(i) for i in rng.choice(pop, m, replace=False)]
        rep = s[: max(0, m - (lose if rng.random() < 0.5 else 0))]
        w = [1.0] * len(rep) if draw(st.booleans()) or not rep else [float(x) for x in rng.integers(1, 3, len(rep))]
        recs.append({"round": t, "population": pop, "sampled": s, "replied": rep, "clipping_norm": 1.0,
                     "noise_multiplier": draw(SIGMAS) if per_round else sigma0, "released": draw(st.booleans()) or t == 1,
                     "weights": w, "declared_sample_size": draw(st.sampled_from([declared, None]))})
    strategy = {"kind": kind, "classes": ["flwr.serverapp.strategy.fedavg.FedAvg"]}
    if kind not in ("none", "unknown"):
        strategy.update(num_sampled_clients=declared, noise_multiplier=sigma0, clipping_norm=1.0)
        if kind.endswith("adaptive"):
            strategy["clipped_count_stddev"] = draw(SIGMAS)
    local = draw(st.one_of(st.none(), st.fixed_dictionaries({
        "clipping_norm": st.sampled_from([0.0, 1.0, 1e-300, 1e300]), "sensitivity": st.sampled_from([0.0, 2.0, 1e300]),
        "epsilon": st.sampled_from([5e-324, 0.5, 1e300, 0.0]), "delta": st.sampled_from([0.0, 1e-5, 0.99, 1.0, 2.0])})))
    acct = draw(st.one_of(st.none(), st.fixed_dictionaries({"epsilon": NUMBERS, "delta": NUMBERS})))
    run = {"format": "dpaudit-flower-run", "schema": 1, "flwr_version": "1.42.0", "seed": 0, "strategy": strategy,
           "sampler": draw(st.sampled_from(["uniform-without-replacement", "unverified"])), "rounds": recs,
           "local_dp": local, "partitions": {str(1000 + i): i for i in range(n)}, "flower_accountant": acct,
           "data": None, "model_keys": []}
    delta = draw(st.sampled_from([1e-5, 1e-300, 0.5, 1e-12]))
    return run, delta, draw(st.sampled_from(["replace-one", "add-remove"]))


def _check(case) -> None:
    from dpaudit.auditing.flower_run import account_flower_run

    run, delta, relation = case
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "run"
        d.mkdir()
        (d / "flower_run.json").write_text(json.dumps(run))
        with limits(case):
            try:
                acc = account_flower_run(d, delta=delta, neighbouring=relation)
            except DPAuditError:
                return
    figures = [acc.epsilon, acc.sampled_epsilon] + [x for c in acc.per_client for x in (c.sampled, c.participation)]
    assert not any(math.isnan(x) or x < 0 for x in figures), case
    if acc.lower_bound is not None:
        assert not math.isnan(acc.lower_bound) and 0 <= acc.lower_bound <= acc.sampled_epsilon * (1 + 1e-9) + 1e-9, case
    assert all(c.headline == min(c.sampled, c.participation) for c in acc.per_client), case
    if acc.per_client:
        assert acc.epsilon == max(c.headline for c in acc.per_client), case


test_flower_run_directories, test_flower_run_directories_slow = fuzz("flower run records", flower_records(),
                                                                     fast=12, slow=2000)(_check)


def test_lower_bound_settings_of_different_multipliers_share_one_grid():
    # found by the slow run: rounds at 5e-324 (the pair takes sigma 0.05) and at 2 composed PLDs of two grids
    from dpaudit.integrations.flower.accounting import sampled_lower_bound

    low = sampled_lower_bound({(2, 1, 5e-324): 1, (2, 1, 2.0): 1}, 1e-5)
    assert 0 < low < math.inf

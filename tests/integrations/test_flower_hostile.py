"""Issue 44, round four of hostile input, the Flower part: each failure the round found has a test named after it
(the accounting's arithmetic is pinned in test_flower_accounting.py; the property test of run directories is
tests/fuzz/test_fuzz_flower.py). Record-level: run directories written here, no simulation."""

from __future__ import annotations

import json
import math
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_flower_accounting import DELTA, _account, _gdp_epsilon, _run  # noqa: E402

from dpaudit.errors import DataError, ParameterError  # noqa: E402
from dpaudit.integrations.flower.record import MODEL_FILE, RUN_FILE  # noqa: E402


def _main(capsys, *args: str, stdout_only: bool = False) -> tuple[int, str]:
    from dpaudit.cli import main

    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out = capsys.readouterr()
    return exc.value.code or 0, out.out if stdout_only else out.out + out.err


def _gdp_epsilon_log(mu: float, delta: float) -> float:
    """Exact epsilon of mu-GDP at delta in log space (for the large mu of tiny multipliers), by root finding:
    log(Phi(-e/mu + mu/2) - exp(e) Phi(-e/mu - mu/2)) = log(delta)."""
    from scipy import optimize, special

    def f(e):
        a = special.log_ndtr(-e / mu + mu / 2)
        b = e + special.log_ndtr(-e / mu - mu / 2)
        return a + math.log1p(-math.exp(min(b - a, 0.0))) - math.log(delta) if b < a else -math.inf
    return optimize.brentq(f, 0.0, mu * mu + 10 * mu + 100, xtol=1e-9, rtol=1e-12)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _write_run_dir(path: Path, d: dict, *, with_data: bool = True) -> Path:
    """A run directory as the recorder writes it: the record (with digits data when ``with_data``) and a zero
    softmax-regression global model."""
    from safetensors.numpy import save

    path.mkdir(parents=True)
    nodes = sorted({i for r in d["rounds"] for i in r["population"]})
    if with_data:
        rng = np.random.default_rng(0)
        perm = [int(i) for i in rng.permutation(1797)]
        d["data"] = {"dataset": {"name": "digits", "seed": 0},
                     "clients": {str(k): perm[k * 20:(k + 1) * 20] for k in range(len(nodes))},
                     "nonmembers": perm[1000:1300], "attacker": perm[1300:1600]}
    d["model_keys"] = ["layers.1.weight", "layers.1.bias"]
    (path / RUN_FILE).write_text(json.dumps(d))
    (path / MODEL_FILE).write_bytes(save({"layers.1.weight": np.zeros((10, 64), np.float32),
                                          "layers.1.bias": np.zeros(10, np.float32)}))
    return path


def _issue44_record(sigma: float = 1.0, top: int = 11) -> dict:
    """FedAvg sampling 5 under a wrapper told 10, 3 of the 5 replying; node 1000 among the replies in ``top`` rounds."""
    d = _run(n=20, m=5, rounds=30, sigma=sigma)
    others = [1000 + i for i in range(1, 20)]
    j = 0
    for t, r in enumerate(d["rounds"], start=1):
        s = [1000] if t <= top else []
        while len(s) < 5:
            s.append(others[j % len(others)])
            j += 1
        r.update(sampled=s, replied=s[:3], weights=[1.0] * 3, declared_sample_size=10)
    d["strategy"]["num_sampled_clients"] = 10
    return d


def test_unsound_fewer_replies_than_declared_check_no_longer_holds(tmp_path, capsys):
    # issue 44: 5 sampled under a wrapper told 10, 3 replying. The declared sigma 1 gave 52.20 (RDP, the client's 11
    # rounds); the noise added is sigma 3/10 relative to the sum: exactly mu = 2 sqrt(11) / 0.3, epsilon 337.8
    run = _write_run_dir(tmp_path / "run", _issue44_record())
    from dpaudit.auditing.flower_run import account_flower_run

    acc = account_flower_run(run)
    exact = _gdp_epsilon(2 * math.sqrt(11) / 0.3, DELTA)
    assert acc.epsilon >= exact and acc.epsilon == pytest.approx(exact, rel=1e-8) and acc.epsilon > 300
    assert "replies_below_declared" in {c for c, _ in acc.flags}
    code, out = _main(capsys, "flower", "release", str(run), "--out", str(tmp_path / "bundle"))
    assert code == 0, out
    meta = json.loads((tmp_path / "bundle" / "release.json").read_text())
    assert meta["statement"]["statements"][0]["epsilon"] == pytest.approx(acc.epsilon)
    claims = tmp_path / "claims.toml"
    claims.write_text('[[claim]]\nname = "sixty"\nepsilon = 60\ndelta = 1e-5\ngranularity = "user"\nrelease = "bundle"\n')
    code, out = _main(capsys, "check", str(claims), "--json", "--quiet", stdout_only=True)
    verdict = {c["name"]: c["verdict"] for c in json.loads(out)["results"]}
    assert verdict == {"sixty": "UNPROVEN"} and code == 3        # it said HOLDS before


def test_hang_noise_multiplier_0_01(tmp_path):
    # the lower bound's loss grid coarsens with 1/sigma (and its pair takes sigma >= 0.05): was minutes and ~2 GiB
    t0 = _cpu()
    acc = _account(_run(sigma=0.01))
    assert _cpu() - t0 < 10
    assert acc.lower_bound is not None and 0 < acc.lower_bound <= acc.sampled_epsilon
    # the client figures: exact Gaussian DP at mu = 2 sqrt(k) / 0.01
    top = max(acc.per_client, key=lambda c: c.rounds)
    assert top.participation == pytest.approx(_gdp_epsilon_log(2 * math.sqrt(top.rounds) / 0.01, DELTA), rel=1e-6)


def test_hang_300_rounds_with_distinct_noise_multipliers():
    d = _run(rounds=300)
    for i, r in enumerate(d["rounds"]):
        r["noise_multiplier"] = 1.0 + 0.01 * i
    t0 = _cpu()
    acc = _account(d)
    assert _cpu() - t0 < 15          # 8 settings at most (was one accounting pass per distinct multiplier)
    assert 0 < acc.lower_bound <= acc.sampled_epsilon
    # valid both ways: the upper bound is at or above the run accounted at its smallest multiplier's grouping ...
    from dpaudit.integrations.flower.accounting import merge_settings

    groups = {(20, 5, 1.0 + 0.01 * i): 1 for i in range(300)}
    up, lo = merge_settings(groups, upper=True), merge_settings(groups, upper=False)
    assert len(up) == len(lo) == 8 and sum(up.values()) == sum(lo.values()) == 300
    assert min(k[2] for k in up) == 1.0 and max(k[2] for k in lo) == pytest.approx(3.99)
    # ... and each client's own rounds are exact whatever their multipliers
    c = max(acc.per_client, key=lambda c: c.rounds)
    mine = [r["noise_multiplier"] for r in d["rounds"] if c.node_id in r["replied"]]
    mu = 2 * math.sqrt(sum(s ** -2 for s in mine))
    assert c.participation == pytest.approx(_gdp_epsilon(mu, DELTA), rel=1e-8)


def test_hang_60000_clients_per_client_figures_are_not_quadratic(tmp_path):
    # one round in which all 60,000 clients are sampled and reply: ~1.3 MB of node ids, as in the issue. The
    # per-client loop scanned every round's replies per client (60,000 x 60,000); now one pass over the rounds
    n = 60_000
    ids = list(range(10_000, 10_000 + n))
    d = _run()
    d.update(rounds=[{"round": 1, "population": ids, "sampled": ids, "replied": ids, "clipping_norm": 1.0,
                      "noise_multiplier": 2.0, "released": True, "weights": [1.0] * n}], partitions={})
    d["strategy"]["num_sampled_clients"] = n
    run = tmp_path / "run"
    run.mkdir()
    (run / RUN_FILE).write_text(json.dumps(d))
    assert (run / RUN_FILE).stat().st_size > 1_000_000
    from dpaudit.auditing.flower_run import account_flower_run

    t0 = _cpu()
    acc = account_flower_run(run)
    assert _cpu() - t0 < 30 and len(acc.per_client) == n
    # everyone in the one round: each client's figure is one Gaussian of sensitivity 2C at sigma 2
    assert {c.participation for c in acc.per_client} == {acc.per_client[0].participation}
    assert acc.per_client[0].participation == pytest.approx(_gdp_epsilon(1.0, DELTA), rel=1e-8)
    # more participants than a ledger holds (each party an RDP conversion): no ledger, and it says so
    assert acc.ledger is None and any("No per-client ledger" in a for a in acc.assumptions)


def test_resource_120_mb_flower_run_json_is_refused_before_parsing(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with open(run / RUN_FILE, "wb") as fh:            # sparse: the size is what the cap looks at
        fh.truncate(120 << 20)
    from dpaudit.integrations.flower.record import read_flower_run

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(DataError, match="at most 33554432 bytes"):
        read_flower_run(run)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 << 10      # KiB: nothing was read


@pytest.mark.parametrize("sigma, expect", [(1e-300, math.inf), (5e-324, math.inf), (1e300, 0.0)])
def test_crash_extreme_noise_multipliers(sigma, expect, tmp_path, capsys):
    acc = _account(_run(sigma=sigma))
    assert acc.epsilon == expect and acc.sampled_epsilon == expect
    assert acc.lower_bound is not None and acc.lower_bound <= acc.sampled_epsilon
    run = _write_run_dir(tmp_path / "run", _run(sigma=sigma))
    code, out = _main(capsys, "flower", "account", str(run))
    assert code == 0 and "Traceback" not in out
    code, out = _main(capsys, "flower", "release", str(run), "--out", str(tmp_path / "bundle"))
    assert code == 0, out


def test_crash_simulate_noise_multiplier_out_of_range_refused_before_training(tmp_path, capsys):
    t0 = time.monotonic()
    code, out = _main(capsys, "flower", "simulate", "--out", str(tmp_path / "r"), "--noise-multiplier", "1e300")
    assert code == 2 and "noise_multiplier" in out and "1e+300" in out and time.monotonic() - t0 < 10
    assert not (tmp_path / "r").exists()


def test_crash_simulate_noise_multiplier_1e_300_plan_is_accounted_before_training():
    # the plan run_digits_simulation accounts before it starts Flower: a tiny multiplier is an infinite figure,
    # no error (the run itself is tests/integrations/test_flower_run.py's slow test)
    from dpaudit.auditing.flower_run import _preflight

    _preflight("run_digits_simulation", clients=20, sampled=5, declared=5, rounds=30, sigma=1e-300, dp="server-fixed",
               delta=DELTA)


def test_crash_adaptive_clipping_sigma_1e_200():
    d = _run(sigma=1e-200, kind="server-adaptive", clipped_count_stddev=1.0)
    acc = _account(d)
    assert math.isinf(acc.epsilon)              # the model noise is 1e-200: no finite figure in floats
    from dpaudit.integrations.flower.accounting import combined_multiplier

    assert combined_multiplier(1e-200, 2.0) == pytest.approx(1e-200)
    assert combined_multiplier(1e-200, 1e-200) == pytest.approx(1e-200 / math.sqrt(2))
    assert combined_multiplier(3.0, 4.0) == pytest.approx((3.0 ** -2 + 4.0 ** -2) ** -0.5)
    # Flower's own wrapper overflows on it (compute_adaptive_noise_params): the simulation refuses it before training
    pytest.importorskip("flwr")
    from dpaudit.auditing.flower_run import run_digits_simulation

    with pytest.raises(ParameterError, match="noise_multiplier.*1e-200"):
        run_digits_simulation("never-written", dp="server-adaptive", noise_multiplier=1e-200)
    assert not os.path.exists("never-written")


def test_crash_local_dp_delta_above_1_25():
    d = _run(local_dp={"clipping_norm": 1.0, "sensitivity": 2.0, "epsilon": 1.0, "delta": 2.0})
    with pytest.raises(DataError, match=r"'delta' must be in \[0, 1\). Got 2.0"):
        _account(d)
    # a tiny local epsilon: infinite noise, local figure 0
    d = _run(local_dp={"clipping_norm": 1.0, "sensitivity": 2.0, "epsilon": 5e-324, "delta": 1e-5})
    assert _account(d).local_epsilon == 0.0


def test_crash_401_digit_flower_accountant_epsilon(tmp_path, capsys):
    d = _run(flower_accountant={"epsilon": 10 ** 400, "delta": 1e-5, "num_releases": 30})
    acc = _account(d)
    assert not any(f.source == "run" for f in acc.flower)      # past the float range: not a figure
    text = json.dumps(d).replace(str(10 ** 400), "9" * 401)
    run = tmp_path / "run"
    run.mkdir()
    (run / RUN_FILE).write_text(text)
    code, out = _main(capsys, "flower", "account", str(run), "--json")
    assert code == 0 and "Traceback" not in out


def test_flower_audit_out_symlink_is_refused(tmp_path, capsys):
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    t0 = time.monotonic()
    code, out = _main(capsys, "flower", "audit", "--out", str(link))
    assert code == 2 and "symbolic link" in out and time.monotonic() - t0 < 10
    assert list(target.iterdir()) == []


def test_flower_simulate_out_symlink_is_refused_before_training(tmp_path, capsys):
    # round 4 found it refused only when the run was written, after the whole simulation
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    t0 = time.monotonic()
    code, out = _main(capsys, "flower", "simulate", "--out", str(link), "--rounds", "1")
    assert code == 2 and "symbolic link" in out and "Traceback" not in out and time.monotonic() - t0 < 10
    assert list(target.iterdir()) == []


def test_flower_release_bundles_carry_the_certified_interval(tmp_path, capsys):
    run = _write_run_dir(tmp_path / "run", _run())
    code, out = _main(capsys, "flower", "release", str(run), "--out", str(tmp_path / "bundle"))
    assert code == 0, out
    meta = json.loads((tmp_path / "bundle" / "release.json").read_text())
    low = meta["statement"]["lower_bound"]
    assert low is not None and 0 < low["epsilon"] <= meta["statement"]["statements"][0]["epsilon"]
    assert low["routes"] == []
    from dpaudit.accountants.statement import AccountingResult
    from dpaudit.serial import from_dict

    res = from_dict(AccountingResult, meta["statement"], what="release.json")
    assert res.interval_text().startswith("epsilon in [")

"""Issue 34 (items 1, 2, 5): a recorded Flower run accounted per client under the sampler that ran, Flower's own figures
beside dpaudit's with the red flag, and run directories from someone else read as hostile input. No simulation here
(tests/integrations/test_flower_run.py runs the real engine)."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from scipy import optimize, special

from dpaudit.accountants.events import FixedBatchGaussian, SubsampledGaussian
from dpaudit.accountants.rdp import RdpAccountant
from dpaudit.errors import DataError
from dpaudit.integrations.flower.accounting import account_run, flower_convention_epsilon, sampled_lower_bound
from dpaudit.integrations.flower.record import (LEDGER_FILE, MAX_ROUNDS, RUN_FILE, FlowerRun, read_flower_run)
from dpaudit.serial import from_dict, to_dict

DELTA = 1e-5


def _gdp_epsilon(mu: float, delta: float) -> float:
    """Exact epsilon of mu-GDP at delta (Dong, Roth, Su 2019, Corollary 2.13), by root finding."""
    def f(eps):
        return special.ndtr(-eps / mu + mu / 2) - math.exp(eps) * special.ndtr(-eps / mu - mu / 2) - delta
    return optimize.brentq(f, 0.0, 500.0)


def _run(kind="server-fixed", *, n=20, m=5, rounds=30, sigma=2.0, sampler="uniform-without-replacement", seed=0,
         weights=True, local_dp=None, flower_accountant=None, cls=None, **strategy) -> dict:
    rng = np.random.default_rng(seed)
    pop = list(range(1000, 1000 + n))
    recs = []
    for t in range(1, rounds + 1):
        s = [int(i) for i in rng.choice(pop, m, replace=False)]
        recs.append({"round": t, "population": pop, "sampled": s, "replied": s, "clipping_norm": 1.0,
                     "noise_multiplier": sigma if kind != "none" else None, "released": True,
                     "weights": [1.0] * m if weights else []})
    st = {"kind": kind, "classes": cls or ["flwr.serverapp.strategy.fedavg.FedAvg"]}
    if kind != "none":
        st.update(num_sampled_clients=m, noise_multiplier=sigma, clipping_norm=1.0, **strategy)
    return {"format": "dpaudit-flower-run", "schema": 1, "flwr_version": "1.42.0", "seed": seed, "strategy": st,
            "sampler": sampler, "rounds": recs, "local_dp": local_dp, "partitions": {str(1000 + i): i for i in range(n)},
            "flower_accountant": flower_accountant, "data": None, "model_keys": []}


def _account(d: dict, **kw):
    return account_run(from_dict(FlowerRun, d, what=RUN_FILE), delta=DELTA, **kw)


def test_headline_setting_is_the_fixed_size_event_with_the_lower_bound_below_it():
    acc = _account(_run())
    ref = RdpAccountant()
    ref.compose(FixedBatchGaussian(20, 5, 2.0, steps=30, neighbouring="substitution"))
    assert acc.sampler_verified and acc.facts["sampled_routes"]["rdp"] == pytest.approx(ref.epsilon_quiet(DELTA), rel=1e-12)
    # the PLD route (issue 43 item 2) is the headline: smaller, and never below the certified lower bound
    assert acc.facts["sampled_route"] == "pld" and acc.sampled_epsilon == acc.facts["sampled_routes"]["pld"]
    assert 0 < acc.lower_bound <= acc.sampled_epsilon < acc.facts["sampled_routes"]["rdp"]
    # add/remove: the Poisson figure at sigma/2 is the upper bound, and the same pair bounds it below: a tight interval
    ar = _account(_run(), neighbouring="add-remove")
    assert ar.lower_bound <= ar.sampled_epsilon <= 1.2 * ar.lower_bound
    assert ar.sampled_epsilon < acc.sampled_epsilon


def test_per_client_figures_come_from_each_clients_own_rounds():
    acc = _account(_run())
    d = _run()
    k = {i: sum(i in r["sampled"] for r in d["rounds"]) for i in d["rounds"][0]["population"]}
    for c in acc.per_client:
        assert c.rounds == k[c.node_id] and c.partition == c.node_id - 1000
        # k Gaussian mechanisms of sensitivity 2C at sigma: mu = 2 sqrt(k) / sigma, accounted exactly (rounded up)
        exact = _gdp_epsilon(2 * math.sqrt(c.rounds) / 2.0, DELTA)
        assert exact <= c.participation <= exact * (1 + 1e-9) + 1e-9
        assert c.headline == min(c.sampled, c.participation)
    assert acc.epsilon == max(c.headline for c in acc.per_client)
    led = acc.privacy_ledger()
    # the ledger (a PLD ledger, issue 43) reads every client's figure as the accounting reports it: the amplified
    # parties the fixed-size sampling PLD (not RDP's 18.90), the others their own rounds' exact Gaussian DP
    assert acc.ledger["accountant"] == "pld" and led.to_dict() == acc.ledger
    assert len(led.parties) == 20 and led.overall().epsilon == acc.epsilon < acc.facts["sampled_routes"]["rdp"]
    for c in acc.per_client:
        assert led.epsilon(f"partition {c.partition}") == pytest.approx(c.headline, rel=1e-12)
        assert led.epsilon(f"partition {c.partition}") >= acc.lower_bound or c.headline == c.participation


def test_flowers_conventions_and_the_red_flag():
    acc = _account(_run())
    figs = {f.convention: f for f in acc.flower}
    # no-amplification: Flower's GaussianDpEvent(sigma) x 30 under add/remove is mu-GDP with mu = sqrt(30) / sigma
    assert figs["no-amplification"].epsilon >= _gdp_epsilon(math.sqrt(30) / 2.0, DELTA)
    # without-replacement + replace-one passes GaussianDpEvent(sigma) where the sum moves by 2C: below the certified
    # lower bound of the run, flagged
    wor = figs["without-replacement"]
    assert wor.epsilon < acc.lower_bound and wor.below_lower_bound
    assert any(code == "flower_below_lower_bound" for code, _ in acc.flags)
    assert not figs["no-amplification"].below_lower_bound


def test_the_issues_mnist_setting():
    # issue 34: Flower's convention gives 1.116 on 60000 / 256 / sigma 1.1 / 702 steps; the explicit pair certifies
    # far more: 4.31 from the Poisson-style pair at the default grid of 1e-3, 4.664 from the accountants' fixed-size
    # pairs (issue 33), which the lower bound takes when every round has the same setting
    eps, _ = flower_convention_epsilon("without-replacement", 60000, 256, 1.1, 702, DELTA)
    assert eps == pytest.approx(1.116, abs=1e-3)
    lower = sampled_lower_bound({(60000, 256, 1.1): 702}, DELTA)
    assert 4.6 < lower
    up = RdpAccountant()
    up.compose(FixedBatchGaussian(60000, 256, 1.1, steps=702, neighbouring="substitution"))
    assert lower <= up.epsilon_quiet(DELTA)


def test_unverified_sampling_falls_back_to_no_amplification():
    acc = _account(_run(sampler="unverified"))
    assert not acc.sampler_verified and math.isinf(acc.sampled_epsilon) and acc.lower_bound is None
    assert all(c.headline == c.participation for c in acc.per_client)
    assert any(code == "sampling_unverified" for code, _ in acc.flags)
    # a round that aggregated fewer replies than it sampled: not verified either
    d = _run()
    d["rounds"][3]["replied"] = d["rounds"][3]["sampled"][:4]
    d["rounds"][3]["weights"] = [1.0] * 4
    assert not _account(d).sampler_verified


def test_unequal_weights_and_no_dp_give_no_guarantee():
    d = _run()
    d["rounds"][0]["weights"] = [1.0, 1.0, 1.0, 1.0, 7.0]
    acc = _account(d)
    assert math.isinf(acc.epsilon) and any(code == "unequal_weights" for code, _ in acc.flags)
    none = _account(_run("none"))
    assert math.isinf(none.epsilon) and none.ledger is None and none.lower_bound is None
    assert any(code == "no_dp" for code, _ in none.flags)
    assert math.isinf(_account(_run("unknown", cls=["my.Strategy"])).epsilon)


def test_adaptive_clipping_accounts_the_clipped_count_noise():
    sz, sb = 2.5, 1.0
    eff = (sz ** -2 + (2 * sb) ** -2) ** -0.5       # Andrew et al. 2021, Theorem 1
    d = _run("server-adaptive", sigma=sz, clipped_count_stddev=sb)
    d["strategy"]["noise_multiplier"] = eff
    acc = _account(d)
    ref = RdpAccountant()
    ref.compose(FixedBatchGaussian(20, 5, eff, steps=30, neighbouring="substitution"))
    assert acc.facts["sampled_routes"]["rdp"] == pytest.approx(ref.epsilon_quiet(DELTA), rel=1e-12)
    from dpaudit.integrations.flower.accounting import sampled_pld_epsilon

    # the PLD route: the smaller of its 1e-3 grid and the per-client ledger's own (finer) grid, both valid
    coarse = sampled_pld_epsilon({(20, 5, eff): 30}, DELTA, "replace-one")
    assert acc.lower_bound <= acc.sampled_epsilon <= coarse and acc.sampled_epsilon == pytest.approx(coarse, rel=1e-4)
    assert acc.sampled_epsilon > _account(_run(sigma=sz)).sampled_epsilon   # the count costs privacy


def test_local_dp_composes_over_a_clients_own_rounds_and_flags_its_sensitivity():
    local = {"clipping_norm": 1.0, "sensitivity": 1.0, "epsilon": 0.5, "delta": 1e-5}
    acc = _account(_run(local_dp=local))
    std = 1.0 * math.sqrt(2 * math.log(1.25 / 1e-5)) / 0.5
    for c in acc.per_client:
        exact = _gdp_epsilon(2.0 * math.sqrt(c.rounds) / std, DELTA)   # sensitivity 2C per reply
        assert exact <= c.local <= exact * 1.3
    assert acc.local_epsilon == max(c.local for c in acc.per_client)
    assert any(code == "local_dp_sensitivity" for code, _ in acc.flags)


def test_a_recorded_flower_accountant_below_the_lower_bound_is_flagged():
    acc = _account(_run(flower_accountant={"epsilon": 1.0, "delta": DELTA, "num_releases": 30}))
    run_fig = [f for f in acc.flower if f.source == "run"]
    assert run_fig and run_fig[0].below_lower_bound


# ---- hostile run directories ------------------------------------------------------------------------------------

def _write(tmp_path, d) -> str:
    p = tmp_path / "run"
    p.mkdir(exist_ok=True)
    (p / RUN_FILE).write_text(json.dumps(d))
    return str(p)


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d.update(format="pickle"), "format"),
    (lambda d: d["rounds"][0].update(sampled=[1, 2, 3]), "not in the round's population"),
    (lambda d: d["rounds"][0].update(population=[-1]), "node ids"),
    (lambda d: d["rounds"][0].update(population=["1000"]), "population"),
    (lambda d: d["rounds"][0].update(population=[True]), "population|node ids"),
    (lambda d: d["rounds"][0].update(noise_multiplier=float("nan")), "noise_multiplier"),
    (lambda d: d["rounds"][1].update(round=1), "once each"),
    (lambda d: d["strategy"].update(kind="__import__('os')"), "kind"),
    (lambda d: d.update(sampler="trust me"), "sampler"),
    (lambda d: d["rounds"][0].update(weights=[1.0]), "weights"),
    (lambda d: d.update(partitions={"../../etc": 1}), "partitions"),
    (lambda d: d.update(rounds=[{}] * (MAX_ROUNDS + 1)), "more than"),
])
def test_hostile_run_records_are_one_named_error(tmp_path, mutate, match):
    d = _run(rounds=3)
    mutate(d)
    with pytest.raises(DataError, match=match):
        read_flower_run(_write(tmp_path, d))


def test_hostile_run_directories(tmp_path):
    good = _write(tmp_path, _run(rounds=3))
    assert len(read_flower_run(good).rounds) == 3
    # a symbolic link instead of the record, or instead of the directory
    (tmp_path / "elsewhere.json").write_text(json.dumps(_run(rounds=3)))
    link = tmp_path / "linked"
    link.mkdir()
    os.symlink(tmp_path / "elsewhere.json", link / RUN_FILE)
    with pytest.raises(DataError, match="symbolic link"):
        read_flower_run(link)
    os.symlink(good, tmp_path / "dirlink")
    with pytest.raises(DataError, match="symbolic link"):
        read_flower_run(tmp_path / "dirlink")
    # not JSON, deeply nested JSON, a file past the cap (sparse: its size is what it claims)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / RUN_FILE).write_text("[" * 100_000)
    with pytest.raises(DataError):
        read_flower_run(bad)
    with open(bad / RUN_FILE, "wb") as fh:
        fh.truncate((256 << 20) + 1)
    with pytest.raises(DataError):
        read_flower_run(bad)
    with pytest.raises(DataError, match="does not exist"):
        read_flower_run(tmp_path / "missing")


def _main(capsys, *args) -> tuple[int, str]:
    from dpaudit.cli import main

    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out = capsys.readouterr()
    return exc.value.code, out.out + out.err


def test_cli_prints_hostile_strings_escaped_and_errors_cleanly(tmp_path, capsys):
    d = _run("unknown", rounds=3, cls=["evil\x1b[2J\x07.Strategy"])
    run = _write(tmp_path, d)
    code, out = _main(capsys, "account", "--flower-run", run)
    assert code in (0, None), out
    assert "\x1b" not in out and "\\x1b" in out and "no_dp" in out
    (tmp_path / "run" / RUN_FILE).write_text("{}")
    code, out = _main(capsys, "account", "--flower-run", run)
    assert code == 2 and "Traceback" not in out and "error" in out
    code, out = _main(capsys, "account", "--flower-run", run, "--mechanism", "dpsgd")
    assert code == 2


def test_json_round_trip_of_the_record():
    run = from_dict(FlowerRun, _run(rounds=4), what=RUN_FILE)
    assert from_dict(FlowerRun, json.loads(json.dumps(to_dict(run))), what=RUN_FILE) == run
    assert (LEDGER_FILE, RUN_FILE) == ("ledger.json", "flower_run.json")


# ---- the recorder on Flower's own strategy objects ----------------------------------------------------------------

def test_the_recorder_knows_flowers_dp_wrappers_and_samplers():
    pytest.importorskip("flwr")
    from flwr.clientapp.mod import LocalDpMod
    from flwr.serverapp import strategy as fs
    from flwr.supercore.differential_privacy import compute_adaptive_noise_params

    from dpaudit.errors import ParameterError
    from dpaudit.integrations.flower.recorder import RecordingStrategy, describe_strategy

    avg = fs.FedAvg(fraction_train=0.25)
    for cls, kind in ((fs.DifferentialPrivacyServerSideFixedClipping, "server-fixed"),
                      (fs.DifferentialPrivacyClientSideFixedClipping, "client-fixed")):
        st, sampler, wrapper = describe_strategy(cls(avg, 1.5, 0.7, 5))
        assert (st.kind, st.noise_multiplier, st.clipping_norm, st.num_sampled_clients) == (kind, 1.5, 0.7, 5)
        assert sampler == "uniform-without-replacement" and wrapper is not None
    for cls, kind in ((fs.DifferentialPrivacyServerSideAdaptiveClipping, "server-adaptive"),
                      (fs.DifferentialPrivacyClientSideAdaptiveClipping, "client-adaptive")):
        st, _, wrapper = describe_strategy(cls(avg, 1.0, 10, clipped_count_stddev=2.0))
        sb, sz = compute_adaptive_noise_params(1.0, 10, 2.0)   # Flower's own split of the asked-for multiplier
        assert st.kind == kind and st.clipped_count_stddev == sb and wrapper.noise_multiplier == pytest.approx(sz)
        assert st.noise_multiplier == pytest.approx(1.0)        # the effective multiplier comes back
    assert describe_strategy(avg)[0].kind == "none"
    assert describe_strategy(fs.FedProx())[1] == "unverified"   # another configure_train: no amplification claimed

    class MySampler(fs.FedAvg):
        def configure_train(self, *a, **k):
            return super().configure_train(*a, **k)

    assert describe_strategy(fs.DifferentialPrivacyServerSideFixedClipping(MySampler(), 1.0, 1.0, 2))[1] == "unverified"
    assert describe_strategy(MySampler())[0].kind == "unknown"
    with pytest.raises(ParameterError, match="DP wrappers"):
        describe_strategy(fs.DifferentialPrivacyServerSideFixedClipping(
            fs.DifferentialPrivacyServerSideFixedClipping(avg, 1.0, 1.0, 2), 1.0, 1.0, 2))
    rec = RecordingStrategy(fs.DifferentialPrivacyServerSideFixedClipping(avg, 1.0, 1.0, 2),
                            local_dp=LocalDpMod(clipping_norm=1.0, sensitivity=2.0, epsilon=0.5, delta=1e-5), seed=3)
    assert rec.local_dp.epsilon == 0.5 and rec.local_dp.noise_std == pytest.approx(2.0 * math.sqrt(2 * math.log(1.25e5)) / 0.5)
    assert rec.run_record().seed == 3 and rec.run_record().rounds == ()


# ---------------------------------------------------------------------------------------------------------------------
# issue 43, item 1: every round at the noise really added (Flower's noise is sigma C / m_declared on the *average* of
# the r replies it aggregated: sigma r / m_declared relative to their sum)


def _cyclic_run(*, n=20, sampled=4, declared=5, rounds=30, sigma=2.0, replied=None, top=10, record_declared=True) -> dict:
    """A run where node 1000 is sampled in rounds 1..top and the others in turn fill the rest of each sample (no other
    node reaches ``top`` rounds); ``replied``: how many of the sampled replies each round aggregated."""
    d = _run(n=n, m=sampled, rounds=rounds, sigma=sigma)
    others = [1000 + i for i in range(1, n)]
    j = 0
    for t, r in enumerate(d["rounds"], start=1):
        s = [1000] if t <= top else []
        while len(s) < sampled:
            s.append(others[j % len(others)])
            j += 1
        rep = s[:replied] if replied is not None else s
        r.update(sampled=s, replied=rep, weights=[1.0] * len(rep))
        if record_declared:
            r["declared_sample_size"] = declared
    d["strategy"]["num_sampled_clients"] = declared
    return d


def _client(acc, node):
    return next(c for c in acc.per_client if c.node_id == node)


def test_fedavg_sampling_fewer_than_the_wrapper_declares_is_accounted_at_the_noise_added():
    # issue 43's case: the wrapper told 5, FedAvg samples 4; the most-sampled client took part in 10 rounds. dpaudit
    # reported 19.05 (the RDP figure of 10 rounds at the declared sigma 2); the noise added was sigma 4/5 = 1.6
    # relative to the sum: exactly mu = 2 sqrt(10) / 1.6 Gaussian DP, epsilon 24.0 at delta 1e-5
    acc = _account(_cyclic_run())
    old = RdpAccountant()
    old.compose(SubsampledGaussian(1.0, 2.0 / 2.0, 10))
    assert old.epsilon_quiet(DELTA) == pytest.approx(19.05, abs=0.01)
    exact = _gdp_epsilon(2 * math.sqrt(10) / 1.6, DELTA)
    assert exact == pytest.approx(24.0, abs=0.01)
    top = _client(acc, 1000)
    assert top.rounds == 10 and exact <= top.participation <= exact * (1 + 1e-9) + 1e-9
    assert acc.epsilon == top.headline >= exact
    codes = [c for c, _ in acc.flags]
    assert "replies_below_declared" in codes and "sampling_unverified" in codes
    assert acc.facts["rounds_below_declared"] == 30
    # per client: every client's figure is its own rounds at 1.6
    for c in acc.per_client:
        assert c.participation == pytest.approx(_gdp_epsilon(2 * math.sqrt(c.rounds) / 1.6, DELTA), rel=1e-8)
    # the ledger's figure of the same client is the exact one (Gaussian DP of its rounds), not RDP's 19.05-style figure
    assert acc.privacy_ledger().epsilon("partition 0") == pytest.approx(top.participation, rel=1e-12)


def test_a_reply_lost_each_round_is_accounted_at_the_replies_aggregated():
    # 5 sampled, 5 declared, one reply lost each round: 4 aggregated, sigma_eff = 2 x 4/5
    acc = _account(_cyclic_run(sampled=5, declared=5, replied=4))
    exact = _gdp_epsilon(2 * math.sqrt(10) / 1.6, DELTA)
    assert _client(acc, 1000).rounds == 10 and acc.epsilon >= exact and acc.epsilon == pytest.approx(exact, rel=1e-8)
    assert {"replies_below_declared", "sampling_unverified"} <= {c for c, _ in acc.flags}
    assert math.isinf(acc.sampled_epsilon) and acc.lower_bound is None       # no amplification claimed
    # a record written before the declared size was kept reads the strategy's num_sampled_clients
    old = _account(_cyclic_run(sampled=5, declared=5, replied=4, record_declared=False))
    assert old.epsilon == acc.epsilon
    # every reply aggregated: the declared figure, no flag
    full = _account(_cyclic_run(sampled=5, declared=5))
    assert "replies_below_declared" not in {c for c, _ in full.flags}
    assert _client(full, 1000).participation == pytest.approx(_gdp_epsilon(2 * math.sqrt(10) / 2.0, DELTA), rel=1e-8)


def test_fewer_replies_with_adaptive_clipping_scale_the_model_noise_only():
    d = _cyclic_run(sampled=5, declared=5, replied=4)
    d["strategy"].update(kind="server-adaptive", clipped_count_stddev=3.0)
    acc = _account(d)
    eff = (1.6 ** -2 + 6.0 ** -2) ** -0.5        # the model noise at 2 x 4/5 with the clipped count's 2 sigma_b
    assert _client(acc, 1000).participation == pytest.approx(_gdp_epsilon(2 * math.sqrt(10) / eff, DELTA), rel=1e-8)


def test_the_exact_figure_of_the_missing_replies_case_against_a_pld():
    # an independent reference: dp_accounting's PLD of the client's 10 Gaussian rounds (sensitivity 2, sigma 1.6),
    # pessimistic: the exact figure lies below it and within its discretisation
    from dp_accounting.pld import privacy_loss_distribution as pld

    ref = pld.from_gaussian_mechanism(1.6, sensitivity=2.0, value_discretization_interval=1e-4).self_compose(10)
    got = _client(_account(_cyclic_run()), 1000).participation
    assert got <= ref.get_epsilon_for_delta(DELTA) <= got * 1.002


# ---------------------------------------------------------------------------------------------------------------------
# issue 43, item 2: the tightest valid bound for fixed-size client sampling (the PLD of the subsampling operator for m
# of N without replacement, dpaudit.accountants.sampling.fixed_size_gaussian_pld) beside RDP; the smaller is the figure


def test_the_headline_run_interval_is_within_ten_percent():
    # before: RDP 18.90 over the certified 9.77 (x1.93); now the PLD route 10.33 (x1.057)
    acc = _account(_run())
    routes = acc.facts["sampled_routes"]
    assert routes["rdp"] == pytest.approx(18.90, abs=0.01) and routes["pld"] == pytest.approx(10.33, abs=0.01)
    assert acc.lower_bound == pytest.approx(9.77, abs=0.01)
    assert acc.sampled_epsilon / acc.lower_bound <= 1.10
    # add/remove: the Poisson Gaussian at sigma/2 as a PLD, against the same pair
    ar = _account(_run(), neighbouring="add-remove")
    assert ar.facts["sampled_route"] == "pld" and ar.lower_bound <= ar.sampled_epsilon <= 1.01 * ar.lower_bound


def test_the_mnist_setting_interval_is_within_ten_percent():
    # 60000 clients, 256 per round, sigma 1.1, 702 rounds: PLD 4.936 (RDP 6.95) over the certified 4.664 (x1.058)
    from dpaudit.integrations.flower.accounting import sampled_pld_epsilon

    groups = {(60000, 256, 1.1): 702}
    up = sampled_pld_epsilon(groups, DELTA, "replace-one")
    lower = sampled_lower_bound(groups, DELTA)
    assert up == pytest.approx(4.936, abs=2e-3) and lower == pytest.approx(4.664, abs=2e-3)
    assert lower <= up <= 1.10 * lower


def test_the_pld_route_is_skipped_where_its_grid_would_not_fit():
    # sigma 0.01: outside the PLD route's range; RDP alone, still above the certified lower bound
    acc = _account(_run(sigma=0.01))
    assert set(acc.facts["sampled_routes"]) == {"rdp"} and acc.lower_bound <= acc.sampled_epsilon
    # every client's figure is then its own rounds: the ledger reads their exact Gaussian DP
    assert acc.ledger["accountant"] == "pld" and acc.privacy_ledger().overall().epsilon == pytest.approx(acc.epsilon)
    # sigma 0.3: the amplified figure is the PLD route's at its coarser grid, but the ledger's own grid (1e-4) cannot
    # hold the loss range: the ledger falls back to RDP, at or above the figure, never below
    acc = _account(_run(sigma=0.3, rounds=5))
    assert acc.facts["sampled_route"] == "pld" and acc.ledger["accountant"] == "rdp"
    assert acc.privacy_ledger().overall().epsilon >= acc.epsilon >= acc.lower_bound
    # past MAX_PLD_LEDGER_PARTIES clients (reading a PLD ledger back rebuilds every party's PLD): RDP, and it says so
    from dpaudit.integrations.flower.accounting import MAX_PLD_LEDGER_PARTIES

    acc = _account(_run(n=MAX_PLD_LEDGER_PARTIES + 6, m=35, rounds=30))
    assert acc.facts["sampled_route"] == "pld" and acc.ledger["accountant"] == "rdp"
    assert any("more than" in a for a in acc.ledger["assumptions"])
    assert acc.privacy_ledger().overall().epsilon >= acc.epsilon >= acc.lower_bound


def test_python_and_cli_defaults_are_the_same():
    # issue 43 item 4: run_digits_simulation defaulted to noise multiplier 1 in Python and 2 on the CLI
    import inspect

    from dpaudit.auditing.flower_canary import audit_flower_simulation
    from dpaudit.auditing.flower_run import account_flower_run, release_flower_run, run_digits_simulation
    from dpaudit.cli.flower import command

    for name, fn in (("simulate", run_digits_simulation), ("audit", audit_flower_simulation),
                     ("account", account_flower_run), ("release", release_flower_run)):
        sig = inspect.signature(fn).parameters
        checked = 0
        for opt in command.commands[name].params:
            key = {"records_per_client": "records_per_client", "claims": "claim"}.get(opt.name, opt.name)
            if (key in sig and sig[key].default is not inspect.Parameter.empty and isinstance(opt.default, (int, float, str))
                    and not getattr(opt, "is_flag", False)):
                assert opt.default == sig[key].default, (name, key)
                checked += 1
        assert checked >= 2, name


def test_flowers_accountant_below_the_pair_with_most_clients_sampled():
    # 9 of 10 clients, sigma 2, 30 rounds: Flower's no-amplification 15.85 and without-replacement 29.17 both lie
    # below the certified 33.88 (an added client displaces another); dpaudit's upper bound 34.17
    acc = _account(_run(n=10, m=9))
    figs = {f.convention: f for f in acc.flower}
    assert figs["no-amplification"].epsilon == pytest.approx(15.85, abs=0.01)
    assert figs["without-replacement"].epsilon == pytest.approx(29.17, abs=0.01)
    assert acc.lower_bound == pytest.approx(33.88, abs=0.01) and acc.sampled_epsilon == pytest.approx(34.17, abs=0.01)
    assert figs["no-amplification"].below_lower_bound and figs["without-replacement"].below_lower_bound


def test_a_claim_naming_one_client_reads_the_tight_figure(tmp_path):
    # issue 43: the per-client ledger accounted by RDP, so a claim naming one client read 18.90 where the run's
    # figure is 10.33 (certified lower bound 9.77). Now the ledger holds the PLD figure: a claim of 10.5 for that
    # client holds, one of 10.2 is unproven by the ledger's own figure, and none reads below the certified pair
    from dpaudit.auditing.claims import parse_claims
    from dpaudit.auditing.evaluate import evaluate_claims

    acc = _account(_run())
    amp = next(c for c in acc.per_client if c.headline == acc.sampled_epsilon)
    own = next(c for c in acc.per_client if c.headline == c.participation < acc.sampled_epsilon)
    # the run's ledger.json with these two clients only (re-reading a party re-builds its PLD, ~0.2 s each)
    keep = (f"partition {amp.partition}", f"partition {own.partition}")
    led = {**acc.ledger, **{k: {p: acc.ledger[k][p] for p in keep} for k in ("parties", "epsilon")}}
    (tmp_path / "ledger.json").write_text(json.dumps(led))
    claims = [{"name": f"c{i}", "epsilon": eps, "delta": DELTA, "granularity": "user", "ledger": "ledger.json",
               "party": f"partition {c.partition}"} for i, (c, eps) in enumerate([(amp, 10.5), (amp, 10.2), (own, 10.2)])]
    report = evaluate_claims(parse_claims({"claim": claims}, base_dir=tmp_path))
    held, low, mine = report.results
    assert held.verdict == "HOLDS" and held.accounted.epsilon == pytest.approx(10.33, abs=0.01)
    assert held.accounted.epsilon == acc.sampled_epsilon >= acc.lower_bound
    assert low.verdict != "HOLDS" and low.accounted.epsilon == held.accounted.epsilon
    # a client sampled less often: its own rounds' exact figure (below the run's amplified one), as the table says
    assert mine.verdict == "HOLDS" and mine.accounted.epsilon == pytest.approx(own.participation, rel=1e-12)

"""The whole-run method audit plumbing: parameter checks, ``[[method_audits]]`` in audit configs (cached, reported in
JSON / Markdown / HTML) and ``dpaudit audit-method``. A small registered audit (randomized response of one
auditor-controlled user over ``rounds`` reports, certified by the real multi-run rule) stands in for a method so
that these tests do not depend on any method's training cost; each method family has its own tests."""

import json

import numpy as np
import pytest

from dpaudit.attacks.canary import multi_run_certified
from dpaudit.auditing import method_audit
from dpaudit.auditing.method_audit import MethodAuditSpec, MethodRunAudit, audit_method_run, method_run_parameters
from dpaudit.errors import ParameterError
from dpaudit.serial import to_dict

CALLS = []


def _rr_run(*, trials: int = 2000, rounds: int = 5, epsilon: float = 1.0, seed: int = 0, confidence: float = 0.95,
            progress=False) -> MethodRunAudit:
    CALLS.append(seed)
    return _rr(trials, rounds, epsilon, seed, confidence)


def _rr_run_on(*, dataset: str = "digits", trials: int = 200, seed: int = 0, confidence: float = 0.95,
               progress=False) -> MethodRunAudit:
    CALLS.append(dataset)
    return _rr(trials, 5, 1.0, seed, confidence)


def _rr(trials: int, rounds: int, epsilon: float, seed: int, confidence: float) -> MethodRunAudit:
    rng = np.random.default_rng(seed)
    inc = rng.random(trials) < 0.5
    keep = np.exp(epsilon) / (1 + np.exp(epsilon))
    reports = np.where(rng.random((trials, rounds)) < keep, inc[:, None], ~inc[:, None])
    b = multi_run_certified(reports.sum(axis=1).astype(float), inc, delta=0.0, confidence=confidence, seed=seed,
                            score="count")
    return MethodRunAudit("toy", "multi-run", b, epsilon, rounds * epsilon, trials, {"rounds": rounds}, 0.0)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(method_audit.METHOD_RUN_AUDITS, "toy", _rr_run)
    CALLS.clear()
    return "toy"


def test_audit_method_run_checks_parameters(toy):
    assert set(method_run_parameters("toy")) == {"trials", "rounds", "epsilon", "seed", "confidence"}
    with pytest.raises(ParameterError, match="unknown parameter.*roundz"):
        audit_method_run("toy", roundz=3)
    with pytest.raises(ParameterError, match="'method'"):
        audit_method_run("no-such-method")
    r = audit_method_run("toy", trials=2000, rounds=5, epsilon=1.0, seed=3)
    assert r.kind == "certified" and r.refutes_claim and not r.refutes_accounting  # 5 reports at eps 1 each
    assert r.bound.epsilon <= 5.0
    assert to_dict(r)["refutes_claim"] is True and "REFUTED" in r.summary()
    assert to_dict(audit_method_run("toy", trials=2000, seed=3)) == to_dict(r)  # reproducible by seed


def test_method_audit_spec_validation(toy):
    assert MethodAuditSpec("toy", {"rounds": 2}).name == "toy"
    with pytest.raises(ParameterError, match="takes confidence|takes epsilon"):
        MethodAuditSpec("toy", {"bogus": 1})
    with pytest.raises(ParameterError, match="seed"):
        MethodAuditSpec("toy", {"seed": 1})
    with pytest.raises(ParameterError, match="'method'"):
        MethodAuditSpec("nope")


def test_audit_config_runs_and_reports_method_audits(toy, tmp_path):
    from dpaudit.auditing.runner import load_audit_config as load_config, run_audit

    p = tmp_path / "a.toml"
    p.write_text('seed = 2\n[[method_audits]]\nmethod = "toy"\nname = "rr-5"\nparams = {rounds = 5, trials = 1000}\n')
    cfg = load_config(p)
    rep = run_audit(cfg, tmp_path / "out", progress=False)
    (m,) = rep.method_audits
    assert m["name"] == "rr-5" and m["kind"] == "certified" and m["trials"] == 1000
    assert CALLS == [2]
    md = (tmp_path / "out" / "report.md").read_text()
    assert "Certified audits of the methods' training runs" in md and "rr-5" in md and "refuted" in md
    assert "method-audits" in (tmp_path / "out" / "report.html").read_text()
    js = json.loads((tmp_path / "out" / "report.json").read_text())
    assert js["method_audits"][0]["bound"]["epsilon"] == m["bound"]["epsilon"]
    assert [(f["code"], f["model"], f["severity"]) for f in js["flags"]] == [("claim_refuted", "rr-5", "red")]
    run_audit(cfg, tmp_path / "out", progress=False)  # same settings: cached, not re-run
    assert CALLS == [2]
    p.write_text('seed = 2\n[[method_audits]]\nmethod = "toy"\nname = "rr-5"\nparams = {rounds = 6, trials = 1000}\n')
    run_audit(load_config(p), tmp_path / "out", progress=False)
    assert CALLS == [2, 2]
    for bad, match in (('[[method_audits]]\nmethod = "toy"\nparams = {x = 1}\n', "Got x"),
                       ('[[method_audits]]\nmethod = "toy"\nfoo = 1\n', "takes the keys"),
                       ('[[method_audits]]\nparams = {}\n', "takes the keys")):
        p.write_text(bad)
        with pytest.raises(ParameterError, match=match):
            load_config(p)


def test_cli_audit_method(toy, cli, tmp_path):
    from dpaudit.cli import audit_method  # noqa: F401 - the command module

    code, out, err = cli(["audit-method", "toy", "--set", "rounds=4", "--set", "trials=800", "--seed", "1",
                          "--quiet", "--json", "--out", tmp_path / "o"])
    assert code == 0, err
    d = json.loads(out)
    assert d["kind"] == "certified" and d["trials"] == 800
    assert json.loads((tmp_path / "o" / "method_audit.json").read_text())["bound"] == d["bound"]
    for argv, match in ((["--set", "roundz=4"], "roundz"), (["--set", "seed=4"], "--seed"), (["--set", "x"], "KEY=VALUE")):
        code, out, err = cli(["audit-method", "toy", "--quiet", *argv])
        assert code == 2 and match in err and "Traceback" not in err and out == ""
    code, out, err = cli(["audit-method", "nope", "--quiet"])
    assert code == 2 and "'method'" in err and "toy" in err


def test_method_audit_spec_checks_types_and_required(toy, monkeypatch):
    with pytest.raises(ParameterError, match=r"'params.rounds'.*must be an integer.*Got 'many'"):
        MethodAuditSpec("toy", {"rounds": "many"})
    assert MethodAuditSpec("toy", {"epsilon": 2}).params == {"epsilon": 2}  # an int where a float is taken

    def needs(*, clients: int, seed: int = 0, confidence: float = 0.95, progress=False):
        raise AssertionError("not run")

    monkeypatch.setitem(method_audit.METHOD_RUN_AUDITS, "needs", needs)
    with pytest.raises(ParameterError, match=r"'params.clients'.*required"):
        MethodAuditSpec("needs", {})
    with pytest.raises(ParameterError, match=r"'clients' parameter.*required"):
        audit_method_run("needs")


@pytest.mark.parametrize("argv, match", [
    (["pate", "--set", "trials=100000000"], "'trials'"),
    (["fredy", "--set", "trials=50000"], "'trials'.*models in all"),
    (["fedkt", "--set", "trials=100000"], "'trials'.*models in all"),
    (["pate", "--set", "pilot=100000000"], "'pilot'"),
    (["proxyfl", "--set", "ideal_replicates=1000000000"], "'ideal_replicates'"),
    (["privatekt"], "'canary_clients'.*required"),
    (["privatekt", "--set", "canary_clients=1000000000"], "'canary_clients'"),
])
def test_cli_audit_method_refuses_sizes_before_work(cli, argv, match):
    """Found by hand-fuzzing: these hung, ran out of memory or raised TypeError before the checks."""
    import re

    code, out, err = cli(["audit-method", *argv, "--quiet"])
    assert code == 2 and re.search(match, err) and "Traceback" not in err and out == "", err


def test_privatekt_run_audit_at_extreme_epsilon_is_finite_or_infinite_not_a_crash():
    r = audit_method_run("privatekt", canary_clients=4, rounds=1, num_clients=2, canary_records=4, local_epochs=1,
                         epsilon=1e308, seed=0)
    assert r.kind == "certified" and r.bound.epsilon >= 0 and r.accounted_epsilon >= 1e308  # inf past 1 report


def test_method_audits_take_the_audit_configs_data_set_unless_named(monkeypatch, tmp_path):
    from dpaudit.auditing.runner import load_audit_config, run_audit

    monkeypatch.setitem(method_audit.METHOD_RUN_AUDITS, "toy-data", _rr_run_on)
    CALLS.clear()
    p = tmp_path / "a.toml"
    p.write_text('dataset = "breast_cancer"\n[[method_audits]]\nmethod = "toy-data"\n')
    run_audit(load_audit_config(p), tmp_path / "out", progress=False)
    p.write_text('dataset = "breast_cancer"\n[[method_audits]]\nmethod = "toy-data"\nparams = {dataset = "digits"}\n')
    run_audit(load_audit_config(p), tmp_path / "out", progress=False)  # another data set: re-run, not cached
    assert CALLS == ["breast_cancer", "digits"]

"""One vocabulary (issue 45 item 4): relation names accepted in one spelling set everywhere (replace-one is
substitution), granularity names a user types refused unless they are the documented ones, and other libraries'
warnings kept off the terminal unless --verbose."""

from __future__ import annotations

import json
import warnings

import pytest

import dpaudit
from dpaudit.accountants.granularity import canonical_granularity
from dpaudit.cli import main
from dpaudit.errors import ParameterError


def _cli(argv, capsys):
    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


# ---- relations ---------------------------------------------------------------------------------------------------

def test_replace_one_is_substitution_in_the_python_api():
    kw = dict(dataset_size=200, batch_size=20, noise_multiplier=2.0, steps=20, delta=1e-5, sampling="shuffle")
    a = dpaudit.account("dpsgd", neighbouring="replace-one", **kw)
    b = dpaudit.account("dpsgd", neighbouring="substitution", **kw)
    assert a.epsilon == b.epsilon and a.facts["neighbouring"] == "substitution"
    with pytest.raises(ParameterError, match="neighbouring"):
        dpaudit.account("dpsgd", neighbouring="replace-two", **kw)


def test_account_cli_takes_replace_one_for_a_mechanism_and_for_a_flower_run(tmp_path, capsys):
    args = ["account", "--mechanism", "dpsgd", "--dataset-size", "200", "--batch-size", "20", "--steps", "20",
            "--noise-multiplier", "2", "--delta", "1e-5", "--sampling", "shuffle", "--json"]
    code, out_r, err = _cli(args + ["--neighbouring", "replace-one"], capsys)
    assert code == 0, err
    code, out_s, err = _cli(args + ["--neighbouring", "substitution"], capsys)
    assert code == 0 and json.loads(out_r)["epsilon"] == json.loads(out_s)["epsilon"]
    # a recorded Flower run: account --flower-run takes what flower account takes, and both take both spellings
    from dpaudit.integrations.flower.record import RUN_FILE

    pop = list(range(1000, 1010))
    rounds = [{"round": t, "population": pop, "sampled": pop[:5], "replied": pop[:5], "clipping_norm": 1.0,
               "noise_multiplier": 2.0, "released": True, "weights": [1.0] * 5} for t in range(1, 4)]
    run = {"format": "dpaudit-flower-run", "schema": 1, "flwr_version": "1.42.0", "seed": 0,
           "strategy": {"kind": "server-fixed", "classes": ["flwr.serverapp.strategy.fedavg.FedAvg"],
                        "num_sampled_clients": 5, "noise_multiplier": 2.0, "clipping_norm": 1.0},
           "sampler": "uniform-without-replacement", "rounds": rounds, "local_dp": None,
           "partitions": {str(i): i - 1000 for i in pop}, "flower_accountant": None, "data": None, "model_keys": []}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / RUN_FILE).write_text(json.dumps(run))
    figures = set()
    for cmd in (["account", "--flower-run", tmp_path / "run"], ["flower", "account", tmp_path / "run"]):
        for nb in ("replace-one", "substitution"):
            code, out, err = _cli(cmd + ["--neighbouring", nb, "--json"], capsys)
            assert code == 0, (cmd, nb, err)
            figures.add(json.dumps(json.loads(out)["epsilon"]))
    assert len(figures) == 1
    code, _, err = _cli(["flower", "account", tmp_path / "run", "--neighbouring", "zero-out"], capsys)
    assert code == 2 and "--neighbouring" in err


# ---- granularities -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["client", "sample", "clients", "record-level"])
def test_a_granularity_a_user_types_must_be_a_documented_name(name):
    with pytest.raises(ParameterError, match="'granularity'.*'example', 'party', 'report', 'round', 'user'") as info:
        canonical_granularity(name, "granularity", "claims.toml")
    if name == "client":
        assert "did you mean 'user'?" in str(info.value)
    assert canonical_granularity(" Record ", "granularity", "x") == "example"


def test_release_files_of_older_versions_stay_readable():
    assert canonical_granularity("client", "claim.granularity", "release.json", legacy=True) == "user"
    assert canonical_granularity("record (add/remove one)", "g", "release.json", legacy=True) == "example"


def test_a_claims_file_with_granularity_client_is_refused(tmp_path, capsys):
    f = tmp_path / "c.toml"
    f.write_text('[[claim]]\nname = "a"\nmechanism = "laplace"\nparams = { scale = 2.0 }\nepsilon = 0.5\n'
                 'delta = 0.0\ngranularity = "client"\n')
    code, out, err = _cli(["check", f], capsys)
    assert code == 2 and "did you mean 'user'?" in err and out == ""


# ---- third-party warnings ----------------------------------------------------------------------------------------

def test_third_party_warnings_are_dropped_unless_verbose(monkeypatch):
    from dpaudit.accountants.rdp import EdgeOrderWarning
    from dpaudit.cli import _warnings as quiet

    shown: list[str] = []
    monkeypatch.setattr(warnings, "showwarning", lambda m, c, f, ln, file=None, line=None: shown.append(str(m)))
    monkeypatch.setattr(quiet, "_installed", None)

    def emit():
        third = {"__name__": "flwr.common.fake", "warnings": warnings}
        exec("def f():\n    warnings.warn('flower deprecation', DeprecationWarning)\n", third)
        own = {"__name__": "dpaudit.fake", "warnings": warnings}
        exec("def f():\n    warnings.warn('dpaudit notice', UserWarning)\n", own)
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            third["f"]()
            own["f"]()
            warnings.warn("edge of the grid", EdgeOrderWarning)   # dpaudit's category, whoever issues it

    quiet.quiet_third_party(False)
    emit()
    assert shown == ["dpaudit notice", "edge of the grid"]
    shown.clear()
    quiet.quiet_third_party(True)   # --verbose
    emit()
    assert shown == ["flower deprecation", "dpaudit notice", "edge of the grid"]


def test_third_party_log_lines_are_dropped_even_if_the_library_resets_its_level(monkeypatch):
    import logging

    from dpaudit.cli import _warnings as quiet

    logger = logging.getLogger("flwr")
    monkeypatch.setattr(logger, "level", logger.level)
    monkeypatch.setattr(logger, "filters", list(logger.filters))
    monkeypatch.setattr(quiet, "_installed", None)
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler = Keep()
    logger.addHandler(handler)
    try:
        quiet.quiet_third_party(False)
        logger.setLevel(logging.DEBUG)          # what importing flwr does
        logger.warning("DEPRECATED FEATURE")
        logger.error("a real error")
        assert seen == ["a real error"]
        quiet.quiet_third_party(True)           # --verbose
        logger.warning("DEPRECATED FEATURE")
        assert seen == ["a real error", "DEPRECATED FEATURE"]
    finally:
        logger.removeHandler(handler)


def test_verbose_is_accepted_before_and_after_the_command(capsys):
    for argv in (["--verbose", "account", "--help"], ["account", "--verbose", "--help"]):
        code, out, _ = _cli(argv, capsys)
        assert code == 0 and "--verbose" in out

import importlib
import json

import numpy as np
import pytest

from dpaudit.cli import main


def run(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


LDP = ["account", "--mechanism", "ldp", "--epsilon", "5", "--samples", "2", "--classes", "10"]
DPSGD = ["account", "--mechanism", "dpsgd", "--dataset-size", "60000", "--batch-size", "150", "--noise-multiplier", "1.3",
         "--epochs", "15", "--delta", "1e-5"]


def test_ldp_example_prints_beta(capsys):
    code, out, err = run(capsys, *LDP)
    assert code == 0 and err == ""
    assert "beta" in out and "0.5279" in out
    assert "assumptions" in out


def test_ldp_example_json(capsys):
    code, out, _ = run(capsys, *LDP, "--json")
    assert code == 0
    d = json.loads(out)
    assert round(d["facts"]["beta"], 3) == 0.528
    assert d["epsilon"] == 5.0 and d["statement"]["assumptions"]


def test_ldp_rounds_composed_and_shuffled(capsys):
    code, out, _ = run(capsys, *LDP, "--rounds", "500", "--participation", "0.5", "--users", "80", "--delta", "1e-5", "--json")
    assert code == 0
    d = json.loads(out)
    labels = [s["label"] for s in d["statements"]]
    assert any("basic" in l for l in labels) and any("(RDP)" in l for l in labels)
    assert any(l.startswith("shuffled, per round") for l in labels) and any(l.startswith("shuffled, T") for l in labels)
    assert d["facts"]["rounds_expected"] == 250 and d["facts"]["users_per_round"] == 40
    assert any("does not hold" in w for w in d["warnings"])


def test_dpsgd_example_rdp_and_pld(capsys):
    code, out, _ = run(capsys, *DPSGD, "--accountant", "rdp", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["statement"]["method"] == "rdp" and abs(d["epsilon"] - 0.7242) < 5e-5
    code, out, _ = run(capsys, *DPSGD, "--accountant", "pld", "--json")
    d2 = json.loads(out)
    assert d2["statement"]["method"] == "pld" and d2["epsilon"] < d["epsilon"]
    code, out, _ = run(capsys, *DPSGD, "--json")  # default: the smaller route is the headline
    d3 = json.loads(out)
    assert d3["statement"]["method"] == "pld" and d3["epsilon"] == d2["epsilon"]
    code, out, _ = run(capsys, *DPSGD)
    assert code == 0 and "0.7242" in out and "0.6401" in out


@pytest.mark.parametrize("args,needle", [
    (["--mechanism", "ldp", "--epsilon", "0", "--samples", "2", "--classes", "10"], "'epsilon' parameter"),
    (["--mechanism", "ldp", "--epsilon", "-1", "--samples", "2", "--classes", "10"], "Got -1.0"),
    (["--mechanism", "ldp", "--epsilon", "nan", "--samples", "2", "--classes", "10"], "Got nan"),
    (["--mechanism", "ldp", "--epsilon", "5", "--samples", "0", "--classes", "10"], "'samples' parameter"),
    (["--mechanism", "ldp", "--epsilon", "5", "--samples", "2", "--classes", "1"], "'classes' parameter of account_ldp must be an int >= 2. Got 1"),
    (["--mechanism", "ldp", "--epsilon", "5", "--samples", "2", "--classes", "10", "--rounds", "3", "--delta", "1.5"], "'delta' parameter"),
    (["--mechanism", "ldp", "--epsilon", "5", "--samples", "2", "--classes", "10", "--rounds", "3", "--participation", "2"], "'participation'"),
    (["--mechanism", "dpsgd", "--dataset-size", "100", "--batch-size", "150", "--noise-multiplier", "1", "--steps", "3",
      "--delta", "1e-5"], "'batch_size' parameter"),
    (["--mechanism", "dpsgd", "--dataset-size", "100", "--batch-size", "10", "--noise-multiplier", "1", "--steps", "3",
      "--delta", "0"], "'delta' parameter"),
    (["--mechanism", "magic"], "'magic' is not one of"),
    (["--mechanism", "ldp", "--epsilon", "5", "--samples", "2"], "--classes is required"),
    (["--mechanism", "ldp", "--epsilon", "5", "--samples", "2", "--classes", "10", "--gamma", "0.1"], "--gamma is not used"),
    (["--mechanism", "dpsgd", "--dataset-size", "100", "--batch-size", "10", "--noise-multiplier", "1", "--delta", "1e-5"],
     "exactly one of --epochs or --steps"),
    (["--mechanism", "ldp", "--epsilon", "abc", "--samples", "2", "--classes", "10"], "--epsilon"),
])
def test_bad_input_one_line_exit_2(capsys, args, needle):
    code, out, err = run(capsys, "account", *args)
    assert code == 2
    assert needle in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_laplace_needs_pate_module_or_skips(capsys, tmp_path):
    pate = importlib.import_module("dpaudit.accountants.pate")
    if not hasattr(pate, "account_pate"):
        pytest.skip("dpaudit.accountants.pate.account_pate is on the 'pate' branch")
    code, out, err = run(capsys, "account", "--mechanism", "laplace", "--gamma", "0.05", "--queries", "100",
                         "--delta", "1e-5", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert 0 < d["epsilon"] <= 100 * 0.1 + 1e-9
    np.save(tmp_path / "v.npy", np.array([[8, 1, 1], [6, 3, 1]]))
    code, out, err = run(capsys, "account", "--mechanism", "pate", "--votes", str(tmp_path / "v.npy"), "--gamma", "0.05",
                         "--delta", "1e-5", "--json")
    assert code == 0, err

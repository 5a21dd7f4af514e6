"""Issue 27 item 4: `dpaudit account` shows the same headline and route on the console as in its JSON, for every
accountant family; `--accountant X` forces route X and the JSON says X."""

import json

import numpy as np
import pytest

from dpaudit._format import fmt_number
from dpaudit.cli import main


def run(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out = capsys.readouterr()
    assert exc.value.code == 0, out.err
    return out.out


DPSGD = ["--mechanism", "dpsgd", "--dataset-size", "60000", "--batch-size", "150", "--noise-multiplier", "1.3",
         "--epochs", "15", "--delta", "1e-5"]


@pytest.fixture()
def votes(tmp_path):
    np.save(tmp_path / "strong.npy", np.tile([250.0] + [0.0] * 9, (100, 1)))
    np.save(tmp_path / "tied.npy", np.array([[5.0, 5.0, 5.0]] * 10))
    return tmp_path


def cases(d):
    return {
        "dpsgd": (DPSGD, "pld"),
        "dpsgd forced rdp": (DPSGD + ["--accountant", "rdp"], "rdp"),
        "dpsgd forced prv": (DPSGD + ["--accountant", "prv"], "prv"),
        "pate": (["--mechanism", "pate", "--votes", str(d / "strong.npy"), "--gamma", "0.05", "--delta", "1e-5"],
                 "data-dependent"),
        "pate tie": (["--mechanism", "pate", "--votes", str(d / "tied.npy"), "--gamma", "1", "--delta", "1e-5"],
                     "data-independent"),
        "pate forced": (["--mechanism", "pate", "--votes", str(d / "strong.npy"), "--gamma", "0.05", "--delta", "1e-5",
                         "--data-independent"], "data-independent"),
        "gnmax": (["--mechanism", "gnmax", "--votes", str(d / "strong.npy"), "--sigma", "40", "--delta", "1e-5"],
                  "data-dependent RDP"),
        "ldp": (["--mechanism", "ldp", "--epsilon", "5", "--samples", "2", "--classes", "10"], "pure LDP"),
        "ldp rounds": (["--mechanism", "ldp", "--epsilon", "0.5", "--samples", "1", "--classes", "10", "--rounds", "400",
                        "--delta", "1e-5"], "pld"),   # issue 47: the exact PLD of randomized response
    }


@pytest.mark.parametrize("case", ["dpsgd", "dpsgd forced rdp", "dpsgd forced prv", "pate", "pate tie", "pate forced",
                                  "gnmax", "ldp", "ldp rounds"])
def test_console_and_json_name_the_same_headline(capsys, votes, case):
    args, route = cases(votes)[case]
    d = json.loads(run(capsys, "account", *args, "--json"))
    assert d["headline_route"] == d["statement"]["route"] == route
    eps = d["epsilon"]
    routed = [float(s["epsilon"]) for s in d["statements"] if s["route"]]
    if "forced" not in case:
        assert eps == min(routed)                                  # the smallest valid upper bound
    if "headline_route" in d["facts"]:
        assert d["facts"]["headline_route"] == route
    text = run(capsys, "account", *args)
    line = next(x for x in text.splitlines() if x.startswith("* headline:"))
    assert f"ε = {fmt_number(eps)}," in line and line.rstrip().endswith(f"(route: {route})")


def test_forced_route_names_itself_and_the_smallest(capsys):
    d = json.loads(run(capsys, "account", *DPSGD, "--accountant", "rdp", "--json"))
    assert d["headline_route"] == "rdp" and d["facts"]["smallest_route"] == "pld"
    assert d["epsilon"] > min(float(s["epsilon"]) for s in d["statements"] if s["route"])

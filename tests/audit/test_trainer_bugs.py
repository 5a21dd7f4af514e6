"""The bug suite (examples/trainers/): a correct plain-torch DP-SGD trainer, an Opacus one, and one-line bugs from
the literature. Every bug is REFUTED by ``dpaudit check`` with ``attack = {kind = "trainer"}`` at the ``ci`` budget;
the correct trainers never are (5 checks here, 20 seeds under -m slow). Data-dependent normalisation is caught by the
input canaries pooled over 20 runs (the gradient canaries do not see it), the others by the gradient canaries before
that phase runs."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from dpaudit.api import check

ROOT = Path(__file__).resolve().parents[2]
TRAINERS = ROOT / "examples" / "trainers"
RECIPE = 'params = { dataset_size = 1000, batch_size = 64, noise_multiplier = 1.48, epochs = 5 }'
#: Flower's server-side wrapper: 64 of N clients per round without replacement, 80 rounds, sigma 3 (epsilon 1.96)
FLOWER_RECIPE = ('params = { dataset_size = 1000, batch_size = 64, noise_multiplier = 3.0, steps = 80, '
                 'sampling = "fixed-wor" }')
CAUGHT = ("noise_div_batch_twice", "batch_clipping", "noise_once_per_epoch", "clip_after_noise", "shuffle_as_poisson",
          "fixed_as_poisson", "epochs_not_counted", "sigma_wrong_field")
#: Bugs of other trainers: (bug file, the correct file it is one line away from).
OTHER_BUGS = (("lm_dpsgd_bug_noise_not_scaled_by_clip.py", "lm_dpsgd_correct.py"),
              ("flower_dp_bug_noise_div_clients_twice.py", "flower_dp_correct.py"))


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _claims(tmp_path: Path, file: str, seed: int = 0, budget: str = "ci") -> Path:
    p = tmp_path / f"claims_{file}_{seed}.toml"
    p.write_text(f"""
[[claim]]
name = "my-trainer"
epsilon = 2.0
delta = 1e-5
granularity = "example"
mechanism = "dpsgd"
{FLOWER_RECIPE if file.startswith("flower") else RECIPE}
attack = {{ kind = "trainer", train_fn = "{TRAINERS / file}:train", budget = "{budget}", seed = {seed} }}
""")
    return p


def test_each_bug_is_one_line_from_the_correct_trainer():
    correct = (TRAINERS / "dpsgd_correct.py").read_text().split('"""', 2)[2].splitlines()
    for name in CAUGHT + ("data_dependent_normalisation",):
        bug = (TRAINERS / f"dpsgd_bug_{name}.py").read_text().split('"""', 2)[2].splitlines()
        changed = [ln for ln in difflib.unified_diff(correct, bug, lineterm="", n=0)
                   if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
        removed = [ln[1:] for ln in changed if ln.startswith("-")]
        added = [ln[1:] for ln in changed if ln.startswith("+")]
        assert len(removed) == 1 and len(added) == 1, (name, changed)     # one line changed, or one line moved
    for bug_file, correct_file in OTHER_BUGS:
        correct = (TRAINERS / correct_file).read_text().split('"""', 2)[2].splitlines()
        bug = (TRAINERS / bug_file).read_text().split('"""', 2)[2].splitlines()
        changed = [ln for ln in difflib.unified_diff(correct, bug, lineterm="", n=0)
                   if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
        assert len(changed) == 2, (bug_file, changed)


@pytest.mark.parametrize("name", CAUGHT + tuple(b for b, _ in OTHER_BUGS))
def test_bug_is_refuted(tmp_path, name):
    report = check(_claims(tmp_path, name if name.endswith(".py") else f"dpsgd_bug_{name}.py"))
    r = report.results[0]
    assert r.verdict == "REFUTED", r.message()
    assert report.exit_code == 1
    # refuted by the gradient canaries' evidence: the input-canary phase did not run (it costs nothing here)
    assert r.empirical.details["input_canary_runs"] == 0, r.message()


def test_correct_trainers_hold(tmp_path):
    for file in ("dpsgd_correct.py", "opacus_correct.py", "lm_dpsgd_correct.py", "flower_dp_correct.py"):
        for seed in (0, 1) if file == "dpsgd_correct.py" else (0,):
            r = check(_claims(tmp_path, file, seed)).results[0]
            assert r.verdict == "HOLDS", r.message()
            assert r.empirical is not None and r.empirical.certified and r.empirical.epsilon_lower_bound < 2.0
            d = r.empirical.details
            if file in ("dpsgd_correct.py", "opacus_correct.py"):     # a Linear(64, h) first layer: 20 runs scored
                assert d["input_canary_runs"] == 20 and d["input_canary_epsilon"] < 2.0, r.message()
            else:        # the LM has no first layer on the 64 inputs; Flower's clipping divides by a zero update
                assert d["input_canary_epsilon"] is None, r.message()
                assert any("input canaries: not scored" in n for n in d["notes"]), r.message()


def test_data_dependent_normalisation_is_refuted(tmp_path):
    """The gradient canaries do not see it (their clipped contribution is unchanged); the input canaries over 20
    runs do, certified (3.66 at seed 0)."""
    report = check(_claims(tmp_path, "dpsgd_bug_data_dependent_normalisation.py"))
    r = report.results[0]
    assert r.verdict == "REFUTED" and report.exit_code == 1, r.message()
    assert len(r.reasons) == 1 and r.reasons[0].startswith("input canaries over 20 runs: certified one-run lower bound")
    assert r.empirical.certified and r.empirical.epsilon_lower_bound > 2.0
    assert r.empirical.details["input_canary_epsilon"] == r.empirical.epsilon_lower_bound
    assert r.empirical.details["gradient_canary_epsilon"] < 2.0
    # the larger of two certified bounds, chosen after seeing both, holds at the union of their failure shares
    # (0.3 + 0.1 of 1 - 0.95): 0.98, not the input bound's own 0.995
    assert r.empirical.confidence == pytest.approx(0.98)


@pytest.mark.slow
@pytest.mark.parametrize("file", ("dpsgd_correct.py", "opacus_correct.py", "lm_dpsgd_correct.py", "flower_dp_correct.py"))
def test_correct_trainer_never_refuted_over_20_seeds(tmp_path, file):
    lows, inputs, refuted = [], [], []
    for seed in range(20):
        r = check(_claims(tmp_path, file, seed)).results[0]
        if r.verdict == "REFUTED":
            refuted.append((seed, r.reason))
        lows.append(r.empirical.details["analytic_epsilon"])
        inputs.append(r.empirical.details["input_canary_epsilon"])
    assert not refuted, refuted
    if file in ("dpsgd_correct.py", "opacus_correct.py"):       # scored at every seed, never above the claim
        assert all(x is not None and x < 2.0 for x in inputs), inputs
    print(f"{file}: analytic lower bounds over 20 seeds:", [round(x, 3) for x in lows])
    print(f"{file}: input-canary certified bounds over 20 seeds:", [x if x is None else round(x, 3) for x in inputs])


@pytest.mark.slow
@pytest.mark.parametrize("name", CAUGHT + ("data_dependent_normalisation",) + tuple(b for b, _ in OTHER_BUGS))
def test_bug_is_refuted_over_seeds(tmp_path, name):
    file = name if name.endswith(".py") else f"dpsgd_bug_{name}.py"
    for seed in (1, 2, 3):
        r = check(_claims(tmp_path, file, seed)).results[0]
        assert r.verdict == "REFUTED", (name, seed, r.message())
        if name == "data_dependent_normalisation":
            print(f"normalisation bug, seed {seed}: input canaries certify {r.empirical.epsilon_lower_bound:.3f}")


def test_thorough_pools_two_independent_runs():
    from dpaudit.auditing.trainer_audit import audit_trainer

    kw = dict(epsilon=2.0, delta=1e-5, recipe={"dataset_size": 1000, "batch_size": 64, "noise_multiplier": 1.48,
                                               "epochs": 5}, seed=4, input_runs=0)   # the gradient runs only
    one = audit_trainer(f"{TRAINERS / 'dpsgd_correct.py'}:train", budget="ci", **kw)
    two = audit_trainer(f"{TRAINERS / 'dpsgd_correct.py'}:train", budget="thorough", **kw)
    assert (one.runs, two.runs) == (1, 2)
    assert two.noise.steps_used > 1.8 * one.noise.steps_used            # both runs' steps in the limit
    assert two.certified.trials == 2 * two.canaries                     # both runs' canaries in Theorem 3
    # 2 x 2,000 canaries: a relatively narrower noise limit (the bound itself is lower: the canaries double N)
    assert two.noise.sigma_eff_upper / two.noise.sigma_eff < one.noise.sigma_eff_upper / one.noise.sigma_eff
    assert two.verdict == "NOT REFUTED"
    assert two.input_canaries is None and any("input_runs = 0" in n for n in two.notes)

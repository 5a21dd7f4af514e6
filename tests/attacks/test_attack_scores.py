"""Scores-only attacks: the same numbers as the model-based attacks, every score kind, every bad input refused."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import log_softmax, softmax

from dpaudit.attacks.lira import lira_scores, logit_confidence
from dpaudit.attacks.run import SINGLE_MODEL_CAVEAT, run_attack
from dpaudit.attacks.scores import scores_attack, scores_audit, synthetic_scores, true_label_log_odds
from dpaudit.attacks.threshold import loss_scores
from dpaudit.errors import DataError
from dpaudit.serial import to_dict


class _Fixed:
    """A 'model' answering from a table (row i of X holds the record index)."""

    def __init__(self, proba):
        self.proba = proba

    def predict_proba(self, X):
        return self.proba[np.asarray(X)[:, 0].astype(int)]


def _leaky(n=300, C=4, K=16, seed=0):
    """labels, member flags, target logits (2n, C), reference logits (2n, K, C), inclusion (2n, K)."""
    a = synthetic_scores(n, num_classes=C, num_references=K, kind="logits", seed=seed)
    cat = lambda key: np.concatenate([a[f"{key}_train"], a[f"{key}_test"]]).astype(np.float64)  # noqa: E731
    member = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    return (np.concatenate([a["labels_train"], a["labels_test"]]), member, cat("logits"), cat("reference_logits"),
            np.concatenate([a["reference_in_train"], a["reference_in_test"]]))


def test_kinds_agree_on_loss_and_phi() -> None:
    y, _, z, _, _ = _leaky(50)
    p = softmax(z, axis=1)
    loss = -log_softmax(z, axis=1)[np.arange(len(y)), y]
    lp_p, phi_p = true_label_log_odds(p, y, "probabilities")
    lp_z, phi_z = true_label_log_odds(z.astype(np.float32), y, "logits")
    lp_l, phi_l = true_label_log_odds(loss, None, "losses")
    np.testing.assert_allclose(lp_p, loss_scores(p, y), rtol=0, atol=0)
    np.testing.assert_allclose(phi_p, logit_confidence(p, y), rtol=0, atol=0)
    for lp, phi in ((lp_z, phi_z), (lp_l, phi_l)):
        np.testing.assert_allclose(lp, lp_p, atol=1e-5)
        np.testing.assert_allclose(phi, phi_p, atol=1e-5)
    # confident logits: phi keeps its digits (no 1 - p_y), floored like LiRA's at +-27.6
    _, phi = true_label_log_odds(np.array([[30.0, 0.0], [12.0, 0.0]]), np.array([0, 0]), "logits")
    assert phi[0] == pytest.approx(-np.log(1e-12)) and phi[1] == pytest.approx(12.0, rel=1e-12)


def test_threshold_on_scores_equals_run_attack() -> None:
    y, member, z, _, _ = _leaky(200)
    p = softmax(z, axis=1)
    n = 200
    ours = scores_attack(p[:n], p[n:], kind="probabilities", member_labels=y[:n], nonmember_labels=y[n:],
                         attack="threshold", delta=1e-5, seed=3)
    X = np.arange(2 * n)[:, None]
    theirs = run_attack(_Fixed(p), X[:n], y[:n], X[n:], y[n:], attack="threshold", delta=1e-5, seed=3, blind=False,
                        n_bootstrap=0)
    assert ours.attack.metrics.auc == theirs.attack.metrics.auc
    assert ours.attack.bound == theirs.attack.bound
    assert ours.attack.metrics.auc > 0.6
    assert ours.settings["bound"] == "estimate" and SINGLE_MODEL_CAVEAT in ours.notes


def test_lira_on_scores_uses_lira_scores_and_finds_leak() -> None:
    y, member, z, ref, inc = _leaky(300)
    n = 300
    rep = scores_attack(z[:n], z[n:], kind="logits", member_labels=y[:n], nonmember_labels=y[n:], attack="lira",
                        reference_scores=ref, reference_in=inc, seed=0)
    assert rep.settings["online"] is True and rep.settings["num_references"] == 16
    _, t_phi = true_label_log_odds(z, y, "logits")
    _, r_phi = true_label_log_odds(ref.reshape(-1, ref.shape[2]), np.repeat(y, 16), "logits")
    expect = lira_scores(t_phi, r_phi.reshape(2 * n, 16), inc, online=True, fixed_variance=True)
    from dpaudit.attacks.metrics import auc
    assert rep.attack.metrics.auc == pytest.approx(auc(expect[:n], expect[n:]), abs=1e-12)
    off = scores_attack(z[:n], z[n:], kind="logits", member_labels=y[:n], nonmember_labels=y[n:], attack="lira",
                        reference_scores=ref, reference_in=inc, lira_online=False, seed=0)
    assert off.settings["online"] is False
    assert rep.attack.metrics.auc > 0.75 and off.attack.metrics.auc > 0.6


def test_audit_says_which_attacks_were_possible() -> None:
    y, _, z, ref, inc = _leaky(100)
    loss = -log_softmax(z, axis=1)[np.arange(len(y)), y]
    a = scores_audit(loss[:100], loss[100:], kind="losses")
    assert a.possible == ("threshold",) and set(a.skipped) == {"lira", "rmia", "shadow", "blind"}
    b = scores_audit(z[:100], z[100:], kind="logits", member_labels=y[:100], nonmember_labels=y[100:],
                     reference_scores=ref, reference_in=inc)
    assert b.possible == ("threshold", "lira") and "lira" not in b.skipped and "population" in b.skipped["rmia"]
    assert to_dict(b)["possible"] == ["threshold", "lira"]


@pytest.mark.parametrize("case,match", [
    ("nan", "NaN or infinite"),
    ("inf_loss", "NaN or infinite"),
    ("not_summing", "sum to 1"),
    ("out_of_range", "outside \\[0, 1\\]"),
    ("label_length", "one per record"),
    ("label_range", "must lie in"),
    ("no_labels", "needs the records' labels"),
    ("negative_loss", "negative losses"),
    ("classes_differ", "same number of classes"),
    ("ref_rows", "rows but there are"),
    ("mask_shape", "reference_in"),
    ("no_refs", "reference models"),
])
def test_bad_scores_are_refused(case: str, match: str) -> None:
    rng = np.random.default_rng(0)
    p = softmax(rng.normal(size=(20, 3)), axis=1)
    y = rng.integers(0, 3, 20)
    kw = dict(kind="probabilities", member_labels=y[:10], nonmember_labels=y[10:])
    pm, pn = p[:10].copy(), p[10:].copy()
    extra = {}
    if case == "nan":
        pm[3, 1] = np.nan
    elif case == "inf_loss":
        kw = dict(kind="losses")
        pm, pn = np.r_[np.inf, np.ones(9)], np.ones(10)
    elif case == "not_summing":
        pn[2] *= 0.9
    elif case == "out_of_range":
        pn[2] = [1.2, -0.1, -0.1]
    elif case == "label_length":
        kw["member_labels"] = y[:9]
    elif case == "label_range":
        kw["nonmember_labels"] = y[10:] + 3
    elif case == "no_labels":
        kw.pop("member_labels")
    elif case == "negative_loss":
        kw = dict(kind="losses")
        pm, pn = -np.ones(10), np.ones(10)
    elif case == "classes_differ":
        pn = np.c_[pn, np.zeros(10)]
    elif case == "ref_rows":
        extra = dict(attack="lira", reference_scores=np.stack([p[:19]] * 4, axis=1), reference_in=np.zeros((19, 4), bool))
    elif case == "mask_shape":
        extra = dict(attack="lira", reference_scores=np.stack([p] * 4, axis=1), reference_in=np.zeros((20, 4)))
    elif case == "no_refs":
        extra = dict(attack="lira")
    with pytest.raises(DataError, match=match):
        scores_attack(pm, pn, **kw, **extra)

"""RMIA beside LiRA and the threshold attack, from score arrays only, with a per-record risk summary.

A random forest (the "target") is trained on half of scikit-learn's digits; K reference models are trained the same
way on random halves of the other records and of the target's records (the paired layout of
:func:`dpaudit.attacks.references.paired_inclusion`); a population of records that no model trained on plays
RMIA's z. Only the models' probabilities leave the training code, in TensorFlow Privacy ``AttackInputData`` names
(``probs_train`` / ``probs_test`` / ``labels_*``) plus the reference models' outputs and the population's.

    python examples/rmia_scores/rmia_example.py [--references 8] [--seed 0]

Every figure it prints is an estimate on one target model (not a certified bound).
"""

from __future__ import annotations

import argparse

import numpy as np


def _forest(X, y, seed: int):
    from sklearn.ensemble import RandomForestClassifier

    return RandomForestClassifier(n_estimators=30, random_state=seed, n_jobs=1).fit(X, y)


def _proba(model, X, num_classes: int = 10) -> np.ndarray:
    out = np.zeros((len(X), num_classes))
    out[:, model.classes_] = model.predict_proba(X)
    return out


def make_arrays(references: int = 8, seed: int = 0) -> dict[str, np.ndarray]:
    """The arrays an auditor receives: target, reference and population outputs (see the module docstring)."""
    from sklearn.datasets import load_digits

    from dpaudit.attacks.references import paired_inclusion

    X, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(y))
    members, nonmembers, population, extra = perm[:400], perm[400:800], perm[800:1200], perm[1200:]
    target = _forest(X[members], y[members], seed)
    ev = np.r_[members, nonmembers]                                 # targets of the attack
    draw = np.r_[ev, extra]                                         # what reference models train on
    inc = paired_inclusion(len(draw), references, seed=seed + 1)
    refs = [_forest(X[draw[inc[:, k]]], y[draw[inc[:, k]]], seed + 2 + k) for k in range(references)]
    ref_ev = np.stack([_proba(m, X[ev]) for m in refs], axis=1)             # (n, K, C)
    ref_pop = np.stack([_proba(m, X[population]) for m in refs], axis=1)    # (m, K, C)
    return {"probs_train": _proba(target, X[members]), "probs_test": _proba(target, X[nonmembers]),
            "labels_train": y[members], "labels_test": y[nonmembers],
            "reference_probs_train": ref_ev[:400], "reference_probs_test": ref_ev[400:],
            "reference_in_train": inc[:400], "reference_in_test": inc[400:800],
            "population_probs": _proba(target, X[population]), "population_labels": y[population],
            "reference_population_probs": ref_pop}


def main(references: int = 8, seed: int = 0) -> dict:
    from dpaudit.attacks.per_record import summarise_records
    from dpaudit.attacks.scores import compare_scores, scores_attack

    a = make_arrays(references, seed)
    kw = dict(kind="probabilities", member_labels=a["labels_train"], nonmember_labels=a["labels_test"],
              reference_scores=np.concatenate([a["reference_probs_train"], a["reference_probs_test"]]),
              reference_in=np.concatenate([a["reference_in_train"], a["reference_in_test"]]),
              population_scores=a["population_probs"], population_labels=a["population_labels"],
              population_reference_scores=a["reference_population_probs"], seed=seed)
    # one attack: a typed AttackReport (metrics with bootstrap intervals, ROC, an estimated epsilon, per-record scores)
    rmia = scores_attack(a["probs_train"], a["probs_test"], attack="rmia", n_bootstrap=200, per_record=True, **kw)
    m = rmia.attack.metrics
    print(rmia.attack.description)
    print(f"  AUC {m.auc:.3f} [{m.intervals['auc'].low:.3f}, {m.intervals['auc'].high:.3f}], "
          f"TPR at 1% FPR {m.tpr_at(0.01):.3f}; epsilon ~ {rmia.attack.bound.epsilon:.2f} ({rmia.attack.bound.kind})")
    # every attack on the same reference models and targets: a typed AttackComparison
    comp = compare_scores(a["probs_train"], a["probs_test"], n_bootstrap=200, **kw)
    print(f"\n{'attack':<20}{'AUC':>7}{'TPR@0.1%':>10}{'TPR@1%':>9}")
    for name, r in comp.results.items():
        print(f"{name:<20}{r.metrics.auc:>7.3f}{r.metrics.tpr_at(0.001):>10.3f}{r.metrics.tpr_at(0.01):>9.3f}")
    for name, why in comp.skipped.items():
        print(f"{name:<20} not run: {why}")
    if comp.offline_a is not None:
        print(f"offline RMIA: a = {comp.offline_a.a:g}, fitted on the reference models")
    # which records are exposed (indices: members 0..399, non-members 400..799 of the arrays above)
    summary = summarise_records(comp.records, top=5)
    print(f"\nmost exposed records under {summary.primary}:")
    for t in summary.top:
        print(f"  rank {t.rank}: record {t.record} (label {t.label}, {'member' if t.member else 'non-member'}), "
              f"score {t.score:.3f}, {t.statistic_name} {t.statistic:.3g}")
    for s in summary.shares:
        print(f"  at FPR {s.fpr:g}: {s.true_positives} members flagged, {s.top_true_positives} of them in the top "
              f"{s.top_fraction:.0%} of records")
    return {"rmia": rmia, "comparison": comp, "summary": summary}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--references", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    main(args.references, args.seed)

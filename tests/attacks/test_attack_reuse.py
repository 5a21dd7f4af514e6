"""Work an audit asks for repeatedly is done once (the blind baseline), and thread counts change no number."""

from __future__ import annotations

import numpy as np

import dpaudit.attacks.blind as blind


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(30, 5)), rng.integers(0, 3, 30), rng.normal(size=(30, 5)), rng.integers(0, 3, 30)


def test_same_inputs_fit_once_and_give_the_same_scores(monkeypatch):
    fits = []
    real = blind.make_classifier

    def counting(classifier, *, seed=0):
        fits.append(seed)
        return real(classifier, seed=seed)

    monkeypatch.setattr(blind, "make_classifier", counting)
    monkeypatch.setattr(blind, "_MEMO", type(blind._MEMO)())
    Xm, ym, Xn, yn = _data()
    a = blind.blind_scores(Xm, ym, Xn, yn, classifier="logreg", seed=3)
    n = len(fits)
    assert n == 2  # two folds
    a[0][:] = -1  # the caller's copy: the memo is not touched
    b = blind.blind_scores(Xm.copy(), ym.copy(), Xn.copy(), yn.copy(), classifier="logreg", seed=3)
    assert len(fits) == n and not np.all(b[0] == -1)
    fresh = blind.blind_scores(Xm, ym, Xn, yn, classifier="logreg", seed=3)
    assert np.array_equal(b[0], fresh[0]) and np.array_equal(b[1], fresh[1])
    # any changed input is recomputed: a label, the seed, the classifier, the folds
    ym2 = ym.copy()
    ym2[0] = (ym2[0] + 1) % 3
    blind.blind_scores(Xm, ym2, Xn, yn, classifier="logreg", seed=3)
    blind.blind_scores(Xm, ym, Xn, yn, classifier="logreg", seed=4)
    blind.blind_scores(Xm, ym, Xn, yn, classifier="rf", seed=3)
    blind.blind_scores(Xm, ym, Xn, yn, classifier="logreg", seed=3, folds=3)
    assert len(fits) == n + 2 + 2 + 2 + 3


def test_classifier_objects_are_not_memoised(monkeypatch):
    from sklearn.linear_model import LogisticRegression

    monkeypatch.setattr(blind, "_MEMO", type(blind._MEMO)())
    Xm, ym, Xn, yn = _data(1)
    blind.blind_scores(Xm, ym, Xn, yn, classifier=LogisticRegression(max_iter=200), seed=0)
    assert len(blind._MEMO) == 0


def test_catboost_attack_classifier_is_the_same_whatever_its_thread_count(monkeypatch):
    """make_classifier('catboost') takes the process's thread count (dpaudit.threads); that must not change a
    single number of the fitted classifier (CatBoost documents it; checked here bit for bit)."""
    import dpaudit.attacks.shadow as shadow
    import dpaudit.threads as th

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 8))
    y = (X[:, 0] + rng.normal(size=300) > 0).astype(int)
    probs = []
    for n in (1, 3):
        monkeypatch.setattr(th, "current", lambda n=n: th.ThreadSetting(n, "--threads", n, 1))
        clf = shadow.make_classifier("catboost", seed=5)
        assert clf.get_params()["thread_count"] == n
        clf.set_params(iterations=60)
        probs.append(clf.fit(X, y).predict_proba(X))
    assert np.array_equal(probs[0], probs[1])


def test_attack_model_fits_side_by_side_give_the_same_model(monkeypatch):
    """With two threads in the policy, AttackModel fits its CatBoost classifiers (global and per class) side by side
    in two Python threads: the scores equal those of the one-after-another fits bit for bit."""
    import dpaudit.attacks.shadow as shadow
    import dpaudit.threads as th

    rng = np.random.default_rng(1)
    n, C = 600, 3
    p = rng.dirichlet(np.ones(C), size=n)
    y = rng.integers(0, C, n)
    member = (p[np.arange(n), y] + 0.3 * rng.normal(size=n) > 0.4).astype(int)
    calls = []
    real = shadow._fit_all

    def spy(jobs, *, concurrent):
        calls.append((len(jobs), concurrent, th.current().threads))
        for _, clf, _, _ in jobs:
            clf.set_params(iterations=40)
        return real(jobs, concurrent=concurrent)

    monkeypatch.setattr(shadow, "_fit_all", spy)
    out = []
    for threads in (1, 2):
        monkeypatch.setattr(th, "current", lambda t=threads: th.ThreadSetting(t, "--threads", t, 1))
        model = shadow.AttackModel("catboost", seed=3).fit(p, y, member)
        assert sorted(model.per_class_) == [0, 1, 2]
        out.append(model.predict_proba(p, y))
    assert calls == [(4, True, 1), (4, True, 2)]
    assert np.array_equal(out[0], out[1])

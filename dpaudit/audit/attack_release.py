"""Attack a release bundle: the one place that joins a release (training layer) to the attacks layer."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit.attacks import AttackReport, run_attack
from dpaudit.attacks.scores import scores_attack
from dpaudit.errors import DataError
from dpaudit.executors import Executor, LocalExecutor
from dpaudit.training.release import Release, load_release

__all__ = ["attack_release"]


def attack_release(release: Release | str | Path, *, attack: str, num_shadows: int = 16, classifier: Any = "catboost",
                   per_class: bool = True, threshold_kind: str = "loss", lira_online: bool = True,
                   confidence: float = 0.95, delta: float | None = None, n_bootstrap: int = 1000, blind: bool = True,
                   seed: int = 0, executor: Executor | None = None, checkpoint_dir: str | Path | None = None) -> AttackReport:
    """Run :func:`dpaudit.attacks.run_attack` on a release's model.

    Members, non-members and the attacker's pool are the release's ``membership.npz`` indices into its data set
    (rebuilt from ``release.json``); shadow models (``shadow``, ``lira``) use the release's own recipe
    (``Release.train_fn``, and ``Release.train_many`` — the ensemble trainer — for torch models). ``delta`` defaults
    to the release's claimed delta (0 when it claims none). ``executor`` trains the shadow models (default: this
    process); with ``checkpoint_dir``, finished groups of shadow models are kept there, so a re-run (after a
    crash) trains only the missing ones -- keyed by the release's recipe and the settings, so a changed
    setting retrains. Other arguments: see ``run_attack``.
    """
    rel = release if isinstance(release, Release) else load_release(release)
    if delta is None:
        delta = float((rel.meta.get("claim") or {}).get("delta") or 0.0)
    kind = getattr(rel, "kind", "dpaudit")        # duck-typed releases (the contract) are dpaudit's own
    if kind == "scores":
        return _attack_scores(rel, attack=attack, lira_online=lira_online, confidence=confidence, delta=delta,
                              n_bootstrap=n_bootstrap, seed=seed)
    if attack in ("shadow", "lira") and not getattr(rel, "has_recipe", True):
        raise DataError(f"The {attack} attack needs a training recipe for shadow models; release {str(rel.path)!r} has "
                        "none (make it with --train-fn or --recipe-model). Possible here: threshold.")
    ds = rel.dataset()
    m = rel.membership
    for key in ("members", "nonmembers", "attacker"):
        if key not in m:
            raise DataError(f"Release {str(rel.path)!r} has no {key!r} indices in membership.npz.")
    mem, non, pool = (np.asarray(m[k], dtype=np.int64) for k in ("members", "nonmembers", "attacker"))
    train_fn = batch_fn = None
    if attack in ("shadow", "lira"):
        train_fn = rel.train_fn()
        if getattr(rel.spec, "is_torch", False) or kind != "dpaudit":
            batch_fn = rel.train_many()
    if checkpoint_dir is not None:
        salt = hashlib.sha256(json.dumps(
            {"model": rel.meta.get("model"), "created_at": rel.meta.get("created_at"), "dataset": rel.meta.get("dataset"),
             "attack": attack, "num_shadows": num_shadows, "seed": seed}, sort_keys=True, default=str).encode()).hexdigest()
        executor = (executor or LocalExecutor()).with_checkpoints(checkpoint_dir, salt=salt)
    X, y = ds.X, ds.y
    return run_attack(
        rel.model, X[mem], y[mem], X[non], y[non], X[pool], y[pool], attack=attack, train_fn=train_fn,
        batch_train_fn=batch_fn, num_shadows=num_shadows, classifier=classifier, per_class=per_class,
        threshold_kind=threshold_kind, lira_online=lira_online, confidence=confidence, delta=delta,
        n_bootstrap=n_bootstrap, blind=blind, seed=seed, executor=executor,
    )


def _attack_scores(rel: Release, *, attack: str, lira_online: bool, confidence: float, delta: float, n_bootstrap: int,
                   seed: int) -> AttackReport:
    """A scores-only release: threshold and (with reference models) LiRA on its ``scores.npz``."""
    s = rel.scores()
    possible = ["threshold"] + (["lira"] if "reference_scores" in s else [])
    if attack not in possible:
        why = ("needs a model to query and a recipe to train shadow models" if attack == "shadow" else
               "needs reference models' scores with inclusion masks")
        raise DataError(f"The {attack} attack {why}; release {str(rel.path)!r} holds only scores. Possible here: "
                        f"{', '.join(possible)}.")
    kind = rel.meta["model"].get("score_kind")
    return scores_attack(s["member_scores"], s["nonmember_scores"], kind=kind, member_labels=s.get("member_labels"),
                         nonmember_labels=s.get("nonmember_labels"), attack=attack,
                         reference_scores=s.get("reference_scores"), reference_in=s.get("reference_in"),
                         lira_online=None if lira_online else False, confidence=confidence, delta=delta,
                         n_bootstrap=n_bootstrap, seed=seed)

"""Attack a release bundle: the one place that joins a release (training layer) to the attacks layer, and where
``dpaudit attack`` puts its output (never inside the bundle: see :func:`attack_out_dir`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from dataclasses import replace

from dpaudit.attacks import AttackReport, run_attack
from dpaudit.attacks.run import ATTACKS
from dpaudit.attacks.compare import AttackComparison, compare_attacks
from dpaudit.attacks.scores import compare_scores, scores_attack
from dpaudit._io import OUTPUT_MARKER, check_replaceable, is_dpaudit_output, make_output_dir
from dpaudit.errors import DataError, OutputError, check_choice, check_int, check_path, worded
from dpaudit.executors import Executor, LocalExecutor
from dpaudit.training.release import Release, load_release

__all__ = ["attack_release", "attack_out_dir", "attack_output", "ATTACK_RESULTS", "DEFAULT_ATTACK_ROOT", "compare_release",
           "release_record_images"]

#: The files ``dpaudit attack`` writes as results (an earlier one is replaced only with ``--overwrite``).
ATTACK_RESULTS = ("attack.json", "roc.png", "canary_audit.json", "canaries.npz", "comparison.json", "comparison.md",
                  "roc_compare.png", "per_record.csv", "per_record.json", "per_record.md", "per_record_hist.png",
                  "per_record_grid.png")
#: Where ``dpaudit attack`` writes by default: ``runs/attack/<bundle name>-<attack>`` (relative to the current folder).
DEFAULT_ATTACK_ROOT = Path("runs") / "attack"


def _RECIPE_HINT() -> str:    # noqa: N802 - a message fragment, as the caller spells it
    return worded("--train-fn or --recipe-model", "dpaudit.release.make(..., train_fn= or recipe_model=)")


def attack_out_dir(release: str | Path, name: str, out: str | Path | None = None, *, overwrite: bool = False) -> Path:
    """The output folder of an attack (or canary audit) ``name`` on the bundle ``release``: ``out``, or
    ``runs/attack/<bundle name>-<name>``; checked, not created (see :func:`attack_output`).

    Refused (:class:`OutputError`, before any work): a folder inside the bundle (a bundle's content -- cached unit
    checkpoints included -- may be the audited party's, so nothing is read from or written into it); a folder that
    already holds results of an earlier attack (:data:`ATTACK_RESULTS`) unless ``overwrite``, and then only when
    dpaudit wrote it (:func:`dpaudit._io.check_replaceable`); an existing non-empty folder dpaudit did not write.
    """
    bundle = check_path(release, "release", "attack").resolve()
    o = check_path(out, "out", "attack") if out is not None else DEFAULT_ATTACK_ROOT / f"{bundle.name or 'release'}-{name}"
    real = o.resolve()
    if real == bundle or bundle in real.parents:
        raise OutputError(f"--out {o} lies inside the release bundle {release}; dpaudit never writes into a bundle (its "
                          "content may come from the party being audited, so results found there are never trusted). "
                          f"Choose a folder outside it (default: {DEFAULT_ATTACK_ROOT}/<bundle>-<attack>).")
    if o.is_symlink():
        raise OutputError(f"--out {o} is a symbolic link; dpaudit writes only into a folder itself.")
    if o.exists():
        if not o.is_dir():
            raise OutputError(f"{worded('--out', 'out=')} {o} is a file, not a folder.")
        earlier = [f for f in ATTACK_RESULTS if (o / f).exists() or (o / f).is_symlink()]
        if earlier:
            if not overwrite:
                raise OutputError(f"{worded('--out', 'out=')} {o} already holds the results of an earlier attack "
                                  f"({', '.join(earlier)}); pass {worded('--overwrite', 'overwrite=True')} to replace "
                                  f"them, or choose another {worded('--out', 'out')}.")
            check_replaceable(o)
        elif any(o.iterdir()) and not is_dpaudit_output(o):
            raise OutputError(f"--out {o} exists and was not written by dpaudit (it holds no {OUTPUT_MARKER}); choose "
                              "a new or empty folder.")
    return o


@contextlib.contextmanager
def attack_output(release: str | Path, name: str, out: str | Path | None = None, *,
                  overwrite: bool = False) -> Iterator[Path]:
    """:func:`attack_out_dir`, created and marked as dpaudit's for the body; a folder this call created is removed
    again when the body fails before writing anything into it."""
    o = attack_out_dir(release, name, out, overwrite=overwrite)
    created = not o.exists()
    make_output_dir(o, "attack")
    try:
        yield o
    except BaseException:
        if created and o.is_dir() and not o.is_symlink() and {p.name for p in o.iterdir()} <= {OUTPUT_MARKER}:
            shutil.rmtree(o, ignore_errors=True)
        raise


#: The largest counts an attack or audit takes; beyond them a run would take days or exhaust memory (a typo, not a
#: plan). Checked by :func:`check_attack_counts` before anything is loaded or trained.
MAX_SEED = 2**32 - 1
MAX_BOOTSTRAP = 100_000
MAX_SHADOWS = 10_000


def check_attack_counts(owner: str, *, shadows: Any = None, bootstrap: Any = None, population: Any = None,
                        models: Any = None, canaries: Any = None, seed: Any = None) -> None:
    """Every count an attack takes (those given: not None), each an int within its supported range, or one
    :class:`~dpaudit.errors.ParameterError` naming it, its range and the value -- before any work (an unbounded
    bootstrap or shadow count would allocate or train without end)."""
    from dpaudit.training.canaries import MAX_CANARIES
    from dpaudit.training.limits import MAX_MODELS, MAX_RECORDS

    for name, value, low, high in (("shadows", shadows, 0, MAX_SHADOWS), ("bootstrap", bootstrap, 0, MAX_BOOTSTRAP),
                                   ("population", population, 0, MAX_RECORDS), ("seed", seed, 0, MAX_SEED)):
        if value is not None:
            check_int(value, name, owner, low=low, high=high)
    for name, value, high in (("models", models, MAX_MODELS), ("canaries", canaries, MAX_CANARIES)):
        if value is not None:       # the canary audit's own ranges and words (canary_audit_release checks them again)
            check_int(value, name, "canary audit", low=2, high=high)


def attack_release(release: Release | str | Path, *, attack: str, num_shadows: int = 16, classifier: Any = "catboost",
                   per_class: bool = True, threshold_kind: str = "loss", lira_online: bool = True,
                   rmia_online: bool = True, population: int | None = None, gamma: float = 1.0,
                   rmia_a: float | None = None, confidence: float = 0.95, delta: float | None = None,
                   n_bootstrap: int = 1000, blind: bool = True, seed: int = 0, executor: Executor | None = None,
                   checkpoint_dir: str | Path | None = None, per_record: bool = False, code: Any = None) -> AttackReport:
    """Run :func:`dpaudit.attacks.run_attack` on a release's model.

    Members, non-members and the attacker's pool are the release's ``membership.npz`` indices into its data set
    (rebuilt from ``release.json``); shadow models (``shadow``, ``lira``) use the release's own recipe
    (``Release.train_fn``, and ``Release.train_many`` — the ensemble trainer — for torch models). ``delta`` defaults
    to the release's claimed delta (0 when it claims none). ``executor`` trains the shadow models (default: this
    process); with ``checkpoint_dir``, finished groups of shadow models are kept there, so a re-run (after a
    crash) trains only the missing ones -- keyed by the content of the bundle (every file), its data set and the
    settings, and sealed with a digest of their own content, so a changed setting retrains and a checkpoint made
    elsewhere (another bundle, or shipped inside this one) is never used. ``code``
    (:class:`~dpaudit.training.usercode.BundleCode`): for a bundle given by path, the code the user names for its
    factory / training function (none of the bundle's own runs without it). With ``per_record``,
    ``report.per_record.record`` holds the records' indices in the release's data set (scores-only releases: members
    then non-members, the rows of its scores file). Other arguments: see ``run_attack``.
    """
    check_attack_counts("attack_release", shadows=num_shadows, bootstrap=n_bootstrap, population=population, seed=seed)
    check_choice(attack, "attack", "attack_release", ATTACKS)
    rel = release if isinstance(release, Release) else load_release(release, code=code)
    if delta is None:
        delta = float((rel.meta.get("claim") or {}).get("delta") or 0.0)
    kind = getattr(rel, "kind", "dpaudit")        # duck-typed releases (the contract) are dpaudit's own
    if kind == "scores":
        report = _attack_scores(rel, attack=attack, lira_online=lira_online, rmia_online=rmia_online,
                                population=population, gamma=gamma, rmia_a=rmia_a, confidence=confidence, delta=delta,
                                n_bootstrap=n_bootstrap, seed=seed, per_record=per_record)
        return _with_release_records(rel, report)
    if attack in ("shadow", "lira", "rmia") and not getattr(rel, "has_recipe", True):
        raise DataError(f"The {attack} attack needs a training recipe for shadow models; release {str(rel.path)!r} has "
                        f"none (make it with {_RECIPE_HINT()}). Possible here: threshold.")
    ds = rel.dataset()
    m = rel.membership
    for key in ("members", "nonmembers", "attacker"):
        if key not in m:
            raise DataError(f"Release {str(rel.path)!r} has no {key!r} indices in membership.npz.")
    mem, non, pool = (np.asarray(m[k], dtype=np.int64) for k in ("members", "nonmembers", "attacker"))
    train_fn = batch_fn = None
    if attack in ("shadow", "lira", "rmia"):
        train_fn = rel.train_fn()
        if getattr(rel.spec, "is_torch", False) or kind != "dpaudit":
            batch_fn = rel.train_many()
    if checkpoint_dir is not None:
        executor = _checkpointed(rel, executor, checkpoint_dir, attack=attack, num_shadows=num_shadows, seed=seed)
    X, y = ds.X, ds.y
    report = run_attack(
        rel.model, X[mem], y[mem], X[non], y[non], X[pool], y[pool], attack=attack, train_fn=train_fn,
        batch_train_fn=batch_fn, num_shadows=num_shadows, classifier=classifier, per_class=per_class,
        threshold_kind=threshold_kind, lira_online=lira_online, rmia_online=rmia_online, population=population,
        gamma=gamma, rmia_a=rmia_a, confidence=confidence, delta=delta, n_bootstrap=n_bootstrap, blind=blind,
        seed=seed, executor=executor, per_record=per_record,
    )
    return _with_release_records(rel, report)


def _content(rel: Any) -> str:
    """The digest of the attacked bundle's content (every file the loader reads), which salts the shadow-model
    checkpoints: a checkpoint made for another bundle, or shipped with this one, never matches."""
    from dpaudit.training.release import bundle_digest

    path = getattr(rel, "path", None)
    if path is not None and Path(path).is_dir():
        return bundle_digest(path)
    return hashlib.sha256(json.dumps(getattr(rel, "meta", None), sort_keys=True, default=str).encode()).hexdigest()


def _checkpointed(rel: Release, executor: Executor | None, checkpoint_dir: str | Path, **settings: Any) -> Executor:
    """``executor`` keeping finished units in ``checkpoint_dir``, salted with the bundle's content, its data set and
    the attack's settings (see :func:`attack_release`)."""
    salt = hashlib.sha256(json.dumps(
        {"bundle": _content(rel), "dataset": rel.meta.get("dataset"), **settings}, sort_keys=True,
        default=str).encode()).hexdigest()
    return (executor or LocalExecutor()).with_checkpoints(checkpoint_dir, salt=salt)


def _record_map(rel: Release) -> np.ndarray:
    """Release record index of each position of ``[members, non-members]``."""
    m = rel.membership
    return np.concatenate([np.asarray(m["members"], dtype=np.int64), np.asarray(m["nonmembers"], dtype=np.int64)])


def _with_release_records(rel: Release, report: AttackReport) -> AttackReport:
    if report.per_record is None:
        return report
    return replace(report, per_record=replace(report.per_record, record=_record_map(rel)[report.per_record.record]))


def release_record_images(release: Release):
    """``images_of(records) -> (k, C, H, W)`` features of records (indices into the release's data set) when the data
    set is an image set (records shaped (C, H, W) with C in 1..3 and H, W >= 4, or (H, W)); None otherwise
    (tabular data, 1-D signals, scores-only releases)."""
    if getattr(release, "kind", "dpaudit") == "scores":
        return None
    ds = release.dataset()
    shape = tuple(ds.X.shape[1:])
    if not ((len(shape) == 3 and shape[0] in (1, 3) and min(shape[1:]) >= 4) or (len(shape) == 2 and min(shape) >= 4)):
        return None

    def images_of(records) -> np.ndarray:
        return np.asarray(ds.X[np.asarray(records, dtype=np.int64)])

    return images_of


def compare_release(release: Release | str | Path, *, num_references: int = 16, population: int | None = None,
                    gamma: float = 1.0, rmia_a: float | None = None, confidence: float = 0.95,
                    delta: float | None = None, n_bootstrap: int = 1000, seed: int = 0,
                    executor: Executor | None = None, checkpoint_dir: str | Path | None = None,
                    per_record: bool = True, code: Any = None) -> AttackComparison:
    """Every reference-model attack on a release with the *same* reference models and targets
    (:func:`dpaudit.attacks.compare.compare_attacks`; scores-only releases:
    :func:`dpaudit.attacks.scores.compare_scores` on the reference models' outputs they ship). ``records.record``
    holds release record indices. Units are checkpointed in ``checkpoint_dir`` as :func:`attack_release`'s; ``code``:
    as there."""
    check_attack_counts("compare_release", shadows=num_references, bootstrap=n_bootstrap, population=population, seed=seed)
    rel = release if isinstance(release, Release) else load_release(release, code=code)
    if delta is None:
        delta = float((rel.meta.get("claim") or {}).get("delta") or 0.0)
    kind = getattr(rel, "kind", "dpaudit")
    if kind == "scores":
        s = rel.scores()
        if "reference_scores" not in s:
            raise DataError(f"The attack comparison needs reference models' scores with inclusion masks; release "
                            f"{str(rel.path)!r} holds only the target's scores. Possible here: threshold.")
        comp = compare_scores(s["member_scores"], s["nonmember_scores"], kind=rel.meta["model"].get("score_kind"),
                              member_labels=s.get("member_labels"), nonmember_labels=s.get("nonmember_labels"),
                              reference_scores=s.get("reference_scores"), reference_in=s.get("reference_in"),
                              population_scores=s.get("population_scores"), population_labels=s.get("population_labels"),
                              population_reference_scores=s.get("population_reference_scores"),
                              population_reference_in=s.get("population_reference_in"), population=population,
                              gamma=gamma, rmia_a=rmia_a, confidence=confidence, delta=delta, n_bootstrap=n_bootstrap,
                              seed=seed, per_record=per_record)
    else:
        if not getattr(rel, "has_recipe", True):
            raise DataError(f"The attack comparison needs a training recipe for reference models; release "
                            f"{str(rel.path)!r} has none (make it with {_RECIPE_HINT()}).")
        ds = rel.dataset()
        m = rel.membership
        for key in ("members", "nonmembers", "attacker"):
            if key not in m:
                raise DataError(f"Release {str(rel.path)!r} has no {key!r} indices in membership.npz.")
        mem, non, pool = (np.asarray(m[k], dtype=np.int64) for k in ("members", "nonmembers", "attacker"))
        batch_fn = rel.train_many() if getattr(rel.spec, "is_torch", False) or kind != "dpaudit" else None
        if checkpoint_dir is not None:
            executor = _checkpointed(rel, executor, checkpoint_dir, attack="compare", num_shadows=num_references,
                                     population=population, seed=seed)
        X, y = ds.X, ds.y
        comp = compare_attacks(rel.model, X[mem], y[mem], X[non], y[non], X[pool], y[pool],
                               num_references=num_references, population=population, gamma=gamma, a=rmia_a,
                               train_fn=rel.train_fn(), batch_train_fn=batch_fn, confidence=confidence, delta=delta,
                               n_bootstrap=n_bootstrap, seed=seed, executor=executor, per_record=per_record)
    if comp.records is not None:
        comp = replace(comp, records=replace(comp.records, record=_record_map(rel)[comp.records.record]))
    return comp


def _attack_scores(rel: Release, *, attack: str, lira_online: bool, rmia_online: bool, population: int | None,
                   gamma: float, rmia_a: float | None, confidence: float, delta: float, n_bootstrap: int, seed: int,
                   per_record: bool) -> AttackReport:
    """A scores-only release: threshold, (with reference models) LiRA and (with population records too) RMIA on its
    ``scores.npz``."""
    s = rel.scores()
    possible = ["threshold"] + (["lira"] if "reference_scores" in s else []) + \
        (["rmia"] if "reference_scores" in s and "population_scores" in s else [])
    if attack not in possible:
        why = ("needs a model to query and a recipe to train shadow models" if attack == "shadow" else
               "needs reference models' scores with inclusion masks" if attack == "lira" else
               "needs reference models' scores and the target's and reference models' scores on population records")
        raise DataError(f"The {attack} attack {why}; release {str(rel.path)!r} holds only scores. Possible here: "
                        f"{', '.join(possible)}.")
    kind = rel.meta["model"].get("score_kind")
    return scores_attack(s["member_scores"], s["nonmember_scores"], kind=kind, member_labels=s.get("member_labels"),
                         nonmember_labels=s.get("nonmember_labels"), attack=attack,
                         reference_scores=s.get("reference_scores"), reference_in=s.get("reference_in"),
                         lira_online=None if lira_online else False, population_scores=s.get("population_scores"),
                         population_labels=s.get("population_labels"),
                         population_reference_scores=s.get("population_reference_scores"),
                         population_reference_in=s.get("population_reference_in"), population=population,
                         rmia_online=None if rmia_online else False, gamma=gamma, rmia_a=rmia_a,
                         confidence=confidence, delta=delta, n_bootstrap=n_bootstrap, seed=seed, per_record=per_record)

"""Canaries for certified privacy audits: what the auditor plants in training, and the ground truth kept apart.

Canary kinds
------------
``"mislabeled"``  input-space, in-distribution: held-out records of the data set given a wrong label (drawn
                  uniformly among the other classes). Black-box audits score them by the model's loss.
``"ood"``         input-space, out-of-distribution: inputs drawn uniformly at random in the data's value range
                  (nothing like a real record), each with its own random label. Black-box.
``"dirac"``       gradient canaries for white-box DP-SGD audits (Nasr et al. 2023, "Tight auditing of
                  differentially private machine learning", Sec. 4; Steinke, Nasr, Jagielski 2023, Sec. 6):
                  canary ``k`` is the gradient ``C e_{j_k}`` (norm exactly the clipping bound C) on one parameter
                  coordinate ``j_k``. An included Dirac canary behaves like one more training example: in every
                  step it is Poisson-sampled with the model's rate q and its gradient is added to the clipped sum
                  before the noise (:class:`DiracHook`, the ``canary_hook`` of
                  :func:`~dpaudit.training.ensemble.train_ensemble`). Coordinates are taken first among
                  first-layer weights of input features that are zero in every training record (their real
                  gradient is exactly 0, so the canary competes only with the noise), then at random.

Inclusion
---------
``"one-run"`` (Steinke et al. 2023): one model, every canary included by its own fair coin.
``"multi-run"`` (Jagielski et al. 2020; Nasr et al. 2021, 2023): N models, model ``i`` includes the canaries by one
fair coin of its own; each model is one independent trial.

``canaries.npz`` of an audit's output folder holds what the attacker may see (``X``, ``y`` or ``coords``, ``kind``,
``mode``) under plain keys, and the inclusion bits under ``truth/included``; :func:`load_canaries` returns only the
former, :func:`load_canary_truth` only the latter.

Canaries in a release bundle
----------------------------
A method config's ``[canaries]`` table (:class:`CanarySettings`: ``kind``, ``count`` = m, ``seed``) plants ``m``
one-run canaries in the training data of the *released* model. The bundle then holds two files, kept apart so
that whatever scores the canaries never opens the answer:

``canaries.npz``        the attacker's view (:data:`RELEASE_VIEW_KEYS`): ``X``, ``y`` (input kinds) or ``coords``
                        and ``observations`` (Dirac: the ``(T, 1, m)`` noised gradient sums at the canary
                        coordinates, in units of ``sigma C``, recorded by :class:`DiracHook` during the real run).
``canaries_truth.npz``  ``included``: the ``(m,)`` fair coins, read only to compute the bound.

``release.json["canaries"]`` records the kind, count, seed, audit mode and both file names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dpaudit._io import load_npz_file, save_npz
from dpaudit.errors import DataError, ParameterError, check_choice, check_float, check_int
from dpaudit.training.limits import MAX_CANARIES as _MAX_CANARIES

if TYPE_CHECKING:
    import torch

    from dpaudit.training.models import ModelSpec

# torch and the model builder are imported by the functions that build or hook models: the file names, kinds and
# limits here are read by bundle checks that must not load torch (a scores-only bundle is attacked without it)

__all__ = [
    "CANARY_KINDS",
    "INPUT_KINDS",
    "AUDIT_MODES",
    "Canaries",
    "inclusion_bits",
    "make_input_canaries",
    "dirac_coordinates",
    "make_canaries",
    "canary_datasets",
    "DiracHook",
    "write_canaries",
    "load_canaries",
    "load_canary_truth",
    "CanarySettings",
    "MAX_CANARIES",
    "RELEASE_CANARIES_FILE",
    "RELEASE_TRUTH_FILE",
    "RELEASE_VIEW_KEYS",
    "release_canary_files",
]

CANARY_KINDS = ("mislabeled", "ood", "dirac")
INPUT_KINDS = ("mislabeled", "ood")
AUDIT_MODES = ("one-run", "multi-run")
#: Most canaries a ``[canaries]`` table may ask for (beyond this a bundle's canary files would be unbounded).
MAX_CANARIES = _MAX_CANARIES
RELEASE_CANARIES_FILE = "canaries.npz"
RELEASE_TRUTH_FILE = "canaries_truth.npz"
#: The keys of a release's ``canaries.npz`` by canary kind (the attacker's view; never the inclusion bits).
RELEASE_VIEW_KEYS = {"mislabeled": ("X", "y"), "ood": ("X", "y"), "dirac": ("coords", "observations")}


@dataclass(frozen=True)
class CanarySettings:
    """The ``[canaries]`` table of a method config: plant ``count`` one-run canaries of ``kind`` in the training
    data of the released model, each included by its own fair coin drawn from ``seed``.

    ``kind``: ``"mislabeled"`` / ``"ood"`` (black-box, scored on the released weights) or ``"dirac"`` (white-box
    gradient canaries; only where the method trains its released model by DP-SGD). ``count``: m >= 2 (the one-run
    bound needs at least two). ``seed``: the canaries' own seed (coins, records, labels, coordinates), so the
    same run seed can be audited with fresh canaries.
    """

    kind: str = "mislabeled"
    count: int = 100
    seed: int = 0

    def __post_init__(self) -> None:
        o = "[canaries]"
        check_choice(self.kind, "kind", o, CANARY_KINDS)
        check_int(self.count, "count", o, low=2, high=MAX_CANARIES)
        check_int(self.seed, "seed", o, low=0, high=2**63 - 1)

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "count": int(self.count), "seed": int(self.seed)}


def release_canary_files(canaries: Canaries, observations: np.ndarray | None = None
                         ) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, object]]:
    """The files a release bundle gets for one-run ``canaries`` (``{file name: {key: array}}``) and the
    ``release.json["canaries"]`` entry. Dirac canaries need ``observations`` (``(T, 1, m)``, from
    :meth:`DiracHook.observations`); input canaries take none."""
    owner = "release_canary_files"
    if not isinstance(canaries, Canaries) or canaries.mode != "one-run":
        raise ParameterError(f"The 'canaries' parameter of {owner} must be one-run Canaries. Got {canaries!r:.80} instead.")
    m = canaries.num_canaries
    if canaries.kind == "dirac":
        obs = None if observations is None else np.asarray(observations, dtype=np.float64)
        if obs is None or obs.ndim != 3 or obs.shape[1:] != (1, m):
            raise ParameterError(f"The 'observations' parameter of {owner} must be a (T, 1, {m}) array for Dirac "
                                 f"canaries. Got {None if obs is None else obs.shape} instead.")
        view = {"coords": np.asarray(canaries.coords, dtype=np.int64), "observations": obs}
    else:
        if observations is not None:
            raise ParameterError(f"The 'observations' parameter of {owner} is for Dirac canaries only.")
        view = {"X": np.asarray(canaries.X, dtype=np.float32), "y": np.asarray(canaries.y, dtype=np.int64)}
    meta = {"kind": canaries.kind, "count": m, "seed": int(canaries.seed), "audit": "one-run",
            "file": RELEASE_CANARIES_FILE, "truth_file": RELEASE_TRUTH_FILE}
    if canaries.kind == "dirac":
        meta["steps"] = int(view["observations"].shape[0])
    files = {RELEASE_CANARIES_FILE: view,
             RELEASE_TRUTH_FILE: {"included": np.asarray(canaries.included[0], dtype=bool)}}
    return files, meta


@dataclass(frozen=True, eq=False)
class Canaries:
    """A set of ``m`` canaries and which of the ``M`` models include which of them.

    Attributes
    ----------
    kind : one of :data:`CANARY_KINDS`
    mode : ``"one-run"`` or ``"multi-run"``
    X, y : arrays ``(m, *input_shape)`` and ``(m,)`` (input-space kinds), else None
    coords : int array ``(m,)`` of flat parameter coordinates (``"dirac"``), else None
    included : bool array ``(M, m)`` -- the ground truth; never handed to the attack
    seed : int
    """

    kind: str
    mode: str
    X: np.ndarray | None
    y: np.ndarray | None
    coords: np.ndarray | None
    included: np.ndarray
    seed: int

    @property
    def num_canaries(self) -> int:
        return int(self.included.shape[1])

    @property
    def num_models(self) -> int:
        return int(self.included.shape[0])

    def attacker_view(self) -> dict[str, np.ndarray]:
        """What the auditor's scoring sees: the canaries, not who included them."""
        out = {"kind": np.array(self.kind), "mode": np.array(self.mode), "seed": np.array(self.seed)}
        if self.X is not None:
            out["X"], out["y"] = self.X, self.y
        if self.coords is not None:
            out["coords"] = self.coords
        return out


def inclusion_bits(mode: str, num_canaries: int, num_models: int, seed: int) -> np.ndarray:
    """Fair-coin inclusion: ``(num_models, num_canaries)`` bools. One-run: one model, one coin per canary;
    multi-run: one coin per model (all its canaries follow it)."""
    owner = "inclusion_bits"
    check_choice(mode, "audit", owner, AUDIT_MODES)
    m = check_int(num_canaries, "canaries", owner, low=1, high=MAX_CANARIES)
    rng = np.random.default_rng(np.random.SeedSequence([check_int(seed, "seed", owner, low=0), 0xCA4A]))
    if mode == "one-run":
        check_int(num_models, "models", owner, low=1, high=1)
        return rng.random((1, m)) < 0.5
    n = check_int(num_models, "models", owner, low=2)
    return np.repeat(rng.random((n, 1)) < 0.5, m, axis=1)


def make_input_canaries(kind: str, X_pool: np.ndarray, y_pool: np.ndarray, num_classes: int, num_canaries: int,
                        seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``m`` input-space canaries ``(X, y)``: ``"mislabeled"`` takes ``m`` distinct pool records (records the
    models are not otherwise trained on) and relabels each to a uniformly drawn other class; ``"ood"`` draws
    inputs uniformly in ``[min, max]`` of the pool with uniform labels."""
    owner = "make_input_canaries"
    check_choice(kind, "kind", owner, INPUT_KINDS)
    m = check_int(num_canaries, "canaries", owner, low=1, high=MAX_CANARIES)
    C = check_int(num_classes, "num_classes", owner, low=2)
    X_pool = np.asarray(X_pool, dtype=np.float32)
    y_pool = np.asarray(y_pool).astype(np.int64)
    rng = np.random.default_rng(np.random.SeedSequence([check_int(seed, "seed", owner, low=0), 0xCA4B]))
    if kind == "mislabeled":
        if m > len(X_pool):
            raise ParameterError(f"The 'canaries' parameter of {owner} must be an int <= {len(X_pool)} (the records "
                                 f"available for mislabeled canaries). Got {m} instead.")
        idx = rng.choice(len(X_pool), size=m, replace=False)
        y = (y_pool[idx] + rng.integers(1, C, size=m)) % C
        return X_pool[idx].copy(), y.astype(np.int64)
    lo, hi = float(X_pool.min()), float(X_pool.max())
    X = rng.uniform(lo, hi, size=(m,) + X_pool.shape[1:]).astype(np.float32)
    return X, rng.integers(0, C, size=m).astype(np.int64)


def _param_shapes(spec: ModelSpec) -> list[tuple[str, tuple[int, ...]]]:
    from dpaudit.training.models import build_model

    return [(k, tuple(v.shape)) for k, v in build_model(spec).named_parameters()]


def dirac_coordinates(spec: ModelSpec, num_canaries: int, seed: int, X_train: np.ndarray | None = None) -> np.ndarray:
    """``m`` distinct flat parameter coordinates (parameters in ``named_parameters()`` order, each flattened
    row-major). First the first-layer weights of input features that are zero in every row of ``X_train`` (when
    the first parameter is a ``(hidden, features)`` weight), in seeded random order, then the rest at random."""
    owner = "dirac_coordinates"
    m = check_int(num_canaries, "canaries", owner, low=1, high=MAX_CANARIES)
    shapes = _param_shapes(spec)
    total = sum(math.prod(s) for _, s in shapes)
    if m > total:
        raise ParameterError(f"The 'canaries' parameter of {owner} must be an int <= {total} (the parameters of "
                             f"{spec.name}, one coordinate per Dirac canary). Got {m} instead.")
    rng = np.random.default_rng(np.random.SeedSequence([check_int(seed, "seed", owner, low=0), 0xCA4C]))
    dead = np.zeros(0, dtype=np.int64)
    first = shapes[0][1]
    d = math.prod(spec.input_shape)
    if X_train is not None and len(first) == 2 and first[1] == d:
        Xf = np.asarray(X_train, dtype=np.float32).reshape(len(X_train), -1)
        zero = np.flatnonzero(np.all(Xf == 0, axis=0))
        dead = (np.arange(first[0])[:, None] * d + zero[None, :]).ravel()
        dead = rng.permutation(dead)
    rest = np.setdiff1d(np.arange(total), dead)
    order = np.concatenate([dead, rng.permutation(rest)])
    return order[:m].astype(np.int64)


def make_canaries(kind: str, mode: str, *, num_canaries: int = 1, num_models: int = 1, seed: int = 0,
                  spec: ModelSpec | None = None, X_pool=None, y_pool=None, X_train=None) -> Canaries:
    """Canaries of ``kind`` with ``mode`` inclusion (see the module docstring). Input kinds need the pool
    (``X_pool``, ``y_pool``) and ``spec`` (for the class count); ``"dirac"`` needs ``spec`` (and uses ``X_train``
    to find coordinates with zero real gradient)."""
    owner = "make_canaries"
    check_choice(kind, "kind", owner, CANARY_KINDS)
    check_choice(mode, "audit", owner, AUDIT_MODES)
    from dpaudit.training.models import ModelSpec

    if not isinstance(spec, ModelSpec):
        raise ParameterError(f"The 'spec' parameter of {owner} must be a ModelSpec. Got {spec!r} instead.")
    m = check_int(num_canaries, "canaries", owner, low=1, high=MAX_CANARIES)
    seed = check_int(seed, "seed", owner, low=0)
    if kind == "dirac":
        coords = dirac_coordinates(spec, m, seed, X_train)
        X = y = None
    else:
        if X_pool is None or y_pool is None:
            raise ParameterError(f"{owner}: input-space canaries ({kind!r}) need X_pool and y_pool.")
        X, y = make_input_canaries(kind, X_pool, y_pool, spec.num_classes, m, seed)
        coords = None
    inc = inclusion_bits(mode, m, 1 if mode == "one-run" else num_models, seed)
    return Canaries(kind, mode, X, y, coords, inc, seed)


def canary_datasets(X_base, y_base, canaries: Canaries) -> list[tuple[np.ndarray, np.ndarray]]:
    """Model ``i``'s training set: the base data plus the input canaries it includes (appended at the end)."""
    if canaries.X is None:
        raise ParameterError("canary_datasets needs input-space canaries; Dirac canaries enter through DiracHook.")
    X_base = np.asarray(X_base, dtype=np.float32)
    y_base = np.asarray(y_base).astype(np.int64)
    out = []
    for row in canaries.included:
        out.append((np.concatenate([X_base, canaries.X[row]]), np.concatenate([y_base, canaries.y[row]])))
    return out


class DiracHook:
    """``canary_hook`` for :func:`~dpaudit.training.ensemble.train_ensemble`: adds the included Dirac canaries,
    each Poisson-sampled with the model's rate q in every step, to the clipped gradient sum before the noise,
    and records the noised sum at every canary coordinate (the white-box observation).

    ``observations()`` returns ``(T, M, m)`` floats in units of ``sigma C`` (NaN where a model did not step):
    an excluded canary's entries are ``N(0, 1)`` plus the (scaled) real gradient at its coordinate, an included
    one's get ``+1/sigma`` in the steps that sampled it. What the attack sees is only this array, not the
    sampling or inclusion.
    """

    def __init__(self, spec: ModelSpec, canaries: Canaries, *, max_grad_norm: float, noise_multiplier: float,
                 seed: int):
        if canaries.coords is None:
            raise ParameterError("DiracHook needs Dirac canaries (kind='dirac').")
        self.C = check_float(max_grad_norm, "max_grad_norm", "DiracHook", low=0.0, low_open=True)
        self.sigma = check_float(noise_multiplier, "noise_multiplier", "DiracHook", low=0.0, low_open=True)
        self.shapes = _param_shapes(spec)
        self.sizes = [math.prod(s) for _, s in self.shapes]
        import torch

        self.coords = torch.as_tensor(canaries.coords, dtype=torch.long)
        self.included = np.asarray(canaries.included, dtype=bool)
        self.seed = int(seed)
        self._obs: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def _split(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        import torch

        parts = torch.split(flat, self.sizes, dim=1)
        return {k: p.reshape((flat.shape[0],) + s) for (k, s), p in zip(self.shapes, parts)}

    def extra_gradient(self, t: int, models: np.ndarray, q) -> dict[str, torch.Tensor] | None:
        M, m = self.included.shape
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, int(t), 0xCA4D]))
        u = rng.random((M, m))[models]  # one (M, m) draw per step: model i's stream does not depend on who steps
        qs = np.broadcast_to(np.asarray(q, dtype=float).reshape(-1), (len(models),))
        add = self.included[models] & (u < qs[:, None])
        if not add.any():
            return None
        import torch

        flat = torch.zeros((len(models), sum(self.sizes)), dtype=torch.float32)
        r, c = np.nonzero(add)
        flat.index_put_((torch.as_tensor(r), self.coords[torch.as_tensor(c)]),
                        torch.full((len(r),), self.C, dtype=torch.float32), accumulate=True)
        return self._split(flat)

    def observe(self, t: int, models: np.ndarray, noisy: dict[str, torch.Tensor]) -> None:
        import torch

        flat = torch.cat([noisy[k].reshape(noisy[k].shape[0], -1) for k, _ in self.shapes], dim=1)
        vals = flat[:, self.coords.to(flat.device)].detach().cpu().numpy().astype(np.float64)
        self._obs[int(t)] = (np.asarray(models), vals / (self.sigma * self.C))

    def observations(self) -> np.ndarray:
        M, m = self.included.shape
        steps = sorted(self._obs)
        out = np.full((len(steps), M, m), np.nan)
        for s, t in enumerate(steps):
            models, vals = self._obs[t]
            out[s, models] = vals
        return out


def write_canaries(path: str | Path, canaries: Canaries) -> Path:
    """Write ``canaries.npz`` atomically: the attacker's view under plain keys, the inclusion bits under
    ``truth/included``."""
    return save_npz(path, **canaries.attacker_view(), **{"truth/included": canaries.included})


def _read(path: str | Path) -> dict[str, np.ndarray]:
    p = Path(path)
    if not p.is_file():
        raise DataError(f"The canaries file {p} does not exist.")
    return load_npz_file(p, "the canaries file", kinds=None)   # the one capped loader: zip directory checked first


def load_canaries(path: str | Path) -> dict[str, np.ndarray]:
    """The attacker's view of ``canaries.npz`` (no inclusion bits)."""
    return {k: v for k, v in _read(path).items() if not k.startswith("truth/")}


def load_canary_truth(path: str | Path) -> np.ndarray:
    """The inclusion bits ``(M, m)`` of ``canaries.npz`` (for computing the bound, never for scoring)."""
    z = _read(path)
    if "truth/included" not in z:
        raise DataError(f"{path}: no 'truth/included' array; not a canaries file written by dpaudit.")
    return np.asarray(z["truth/included"], dtype=bool)

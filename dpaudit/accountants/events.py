"""DP events: immutable descriptions of what a mechanism did, validated at construction.

An event says *what happened* (which mechanism, with which parameters, how many times); accountants
(:mod:`dpaudit.accountants`) say *what it costs*. Events are frozen, slotted dataclasses; invalid
parameters raise :class:`~dpaudit.errors.ParameterError` naming the parameter, its range and the value.
Every event round-trips through JSON with :meth:`DpEvent.to_dict` / :func:`event_from_dict`.

Neighbouring relations are stated per event. Unless an event says otherwise, datasets are neighbours
when they differ by replacing one record ("replace-one", or "bounded" DP).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Mapping, Sequence, cast

import numpy as np

from dpaudit.accountants._common import as_votes
from dpaudit.errors import ParameterError, check_bool, check_choice, check_float, check_int, check_probability

__all__ = [
    "DpEvent",
    "RandomizedResponse",
    "LaplaceNoisyMax",
    "GaussianNoisyMax",
    "SubsampledGaussian",
    "FixedBatchGaussian",
    "ShuffledBatchGaussian",
    "RandomStoppingTuning",
    "NEIGHBOURING_RELATIONS",
    "RELATION_ALIASES",
    "canonical_relation",
    "tnb_expected_runs",
    "Composed",
    "Repeated",
    "Shuffled",
    "event_from_dict",
    "rr_keep_probability",
    "rr_epsilon_from_keep_probability",
]

_REGISTRY: dict[str, type["DpEvent"]] = {}


class DpEvent:
    """Base class of all events. Subclasses are frozen, slotted dataclasses registered by class name."""

    __slots__ = ()
    kind: ClassVar[str] = "DpEvent"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _REGISTRY[cls.__name__] = cls

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: ``{"type": <class name>, <field>: <value>, ...}``."""
        out: dict[str, Any] = {"type": type(self).__name__}
        for f in fields(self):  # type: ignore[arg-type]
            out[f.name] = _encode(getattr(self, f.name))
        return out

    @classmethod
    def _from_fields(cls, data: Mapping[str, Any]) -> "DpEvent":
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        unknown = set(data) - names
        if unknown:
            raise ParameterError(
                f"The event dict of {cls.__name__} has unknown field(s) {sorted(unknown)}; allowed: {sorted(names)}."
            )
        return cls(**{k: _decode(v) for k, v in data.items()})


def _encode(value: Any) -> Any:
    if isinstance(value, DpEvent):
        return value.to_dict()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, tuple):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, Mapping) and "type" in value:
        return event_from_dict(value)
    if isinstance(value, list) and value and all(isinstance(v, Mapping) and "type" in v for v in value):
        return tuple(event_from_dict(v) for v in value)
    return value


def event_from_dict(data: Mapping[str, Any]) -> DpEvent:
    """Rebuild an event from :meth:`DpEvent.to_dict` output; validation runs again."""
    if not isinstance(data, Mapping) or "type" not in data:
        raise ParameterError(f"An event dict must be a mapping with a 'type' key. Got {data!r:.80} instead.")
    name = data["type"]
    cls = _REGISTRY.get(name)
    if cls is None or cls is DpEvent:
        raise ParameterError(f"The 'type' of an event dict must be one of {sorted(_REGISTRY)}. Got {name!r} instead.")
    rest = {k: v for k, v in data.items() if k != "type"}
    return cls._from_fields(rest)


# --------------------------------------------------------------------------------------------------
# Randomized response (local DP)
# --------------------------------------------------------------------------------------------------


def rr_keep_probability(epsilon: float, num_samples: int, num_classes: int) -> float:
    """PrivateKT's keep probability (Qi et al., Nature Communications 2023, Lemma 1):

    .. math:: \\beta = \\frac{e^{\\epsilon/K} - 1}{e^{\\epsilon/K} - 1 + C}

    With probability :math:`\\beta` the true one-hot label is sent, otherwise a label drawn uniformly from
    the ``C`` classes (the true one included). Each of the ``K`` labels is then :math:`\\epsilon/K`-LDP and
    the report of ``K`` labels is :math:`\\epsilon`-LDP.
    """
    owner = "rr_keep_probability"
    epsilon = check_float(epsilon, "epsilon", owner, low=0.0, low_open=True)
    k = check_int(num_samples, "num_samples", owner, low=1)
    c = check_int(num_classes, "num_classes", owner, low=2)
    x = epsilon / k
    if x > 700.0:  # expm1 would overflow; beta = 1 - c / (e^x - 1 + c) rounds to 1.0
        return 1.0
    em1 = math.expm1(x)
    return em1 / (em1 + c)


def rr_epsilon_from_keep_probability(keep_probability: float, num_samples: int, num_classes: int) -> float:
    """Inverse of :func:`rr_keep_probability`: :math:`\\epsilon = K \\log(1 + C\\beta/(1-\\beta))`."""
    owner = "rr_epsilon_from_keep_probability"
    beta = check_probability(keep_probability, "keep_probability", owner)
    k = check_int(num_samples, "num_samples", owner, low=1)
    c = check_int(num_classes, "num_classes", owner, low=2)
    return k * math.log1p(c * beta / (1.0 - beta))


@dataclass(frozen=True, slots=True)
class RandomizedResponse(DpEvent):
    """One user's report of ``num_samples`` (K) labels, each through C-ary randomized response.

    Each label is kept with probability :math:`\\beta` and otherwise replaced by a uniform draw over the
    ``num_classes`` (C) classes, so the probability of reporting the true class is
    :math:`\\beta + (1-\\beta)/C` and of each other class :math:`(1-\\beta)/C`. The likelihood ratio of one
    label is :math:`e^{\\epsilon/K}`; the K labels together are :math:`\\epsilon`-LDP.

    Give exactly one of ``epsilon`` (the whole report's budget, split equally over the K labels as in
    PrivateKT, Lemma 1) or ``keep_probability`` (:math:`\\beta` in (0, 1)).

    Neighbouring relation: *local* DP — any two inputs of one user (all K labels may change).

    Reference: Qi et al., "Differentially private knowledge transfer for federated learning",
    Nature Communications 14, 2023, Lemma 1 and Eq. (3).
    """

    num_classes: int
    num_samples: int = 1
    epsilon: float | None = None
    keep_probability: float | None = None

    def __post_init__(self) -> None:
        owner = "RandomizedResponse"
        object.__setattr__(self, "num_classes", check_int(self.num_classes, "num_classes", owner, low=2))
        object.__setattr__(self, "num_samples", check_int(self.num_samples, "num_samples", owner, low=1))
        if (self.epsilon is None) == (self.keep_probability is None):
            raise ParameterError(
                "RandomizedResponse needs exactly one of 'epsilon' or 'keep_probability'. "
                f"Got epsilon={self.epsilon!r}, keep_probability={self.keep_probability!r} instead."
            )
        if self.epsilon is not None:
            eps = check_float(self.epsilon, "epsilon", owner, low=0.0, low_open=True)
            if not eps / self.num_samples > 1e-300:
                raise ParameterError(f"The 'epsilon' parameter of {owner} is out of the supported range: epsilon / num_samples "
                                     f"must be > 1e-300 (the per-label epsilon underflows). Got epsilon={eps!r}, "
                                     f"num_samples={self.num_samples}.")
            object.__setattr__(self, "epsilon", eps)
        else:
            beta = check_probability(self.keep_probability, "keep_probability", owner)
            object.__setattr__(self, "keep_probability", beta)

    @property
    def beta(self) -> float:
        """Keep probability :math:`\\beta`."""
        if self.keep_probability is not None:
            return self.keep_probability
        return rr_keep_probability(self.epsilon, self.num_samples, self.num_classes)  # type: ignore[arg-type]

    @property
    def report_epsilon(self) -> float:
        """Epsilon of the whole K-label report (pure LDP)."""
        if self.epsilon is not None:
            return self.epsilon
        return rr_epsilon_from_keep_probability(self.keep_probability, self.num_samples, self.num_classes)  # type: ignore[arg-type]

    @property
    def sample_epsilon(self) -> float:
        """Epsilon of one label: :math:`\\log(1 + C\\beta/(1-\\beta))`."""
        return self.report_epsilon / self.num_samples


# --------------------------------------------------------------------------------------------------
# Noisy max (PATE family)
# --------------------------------------------------------------------------------------------------



class _VotesEventMixin:
    """Equality, hashing and votes/num_queries validation for events that carry a votes array."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.to_dict() == other.to_dict()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        votes = getattr(self, "votes")
        key = tuple((f.name, getattr(self, f.name)) for f in fields(self) if f.name != "votes")  # type: ignore[arg-type]
        vkey = None if votes is None else (votes.shape, votes.tobytes())
        return hash((type(self).__name__, key, vkey))

    @property
    def data_dependent(self) -> bool:
        return getattr(self, "votes") is not None

    @property
    def n_queries(self) -> int:
        """Number of queries (``num_queries`` after validation: always an int)."""
        return cast(int, getattr(self, "num_queries"))

    def _check_votes(self, owner: str) -> None:
        """Validate ``votes`` (queries x classes) and ``num_queries``: with votes, ``num_queries`` is their row
        count (a different given value is an error); without, it defaults to 1."""
        votes, num_queries = getattr(self, "votes"), getattr(self, "num_queries")
        if votes is not None:
            votes = as_votes(votes, owner)
            object.__setattr__(self, "votes", votes)
            if num_queries is not None and int(num_queries) != votes.shape[0]:
                raise ParameterError(
                    f"The 'num_queries' parameter of {owner} must equal the number of vote rows ({votes.shape[0]}). "
                    f"Got {num_queries} instead."
                )
            object.__setattr__(self, "num_queries", int(votes.shape[0]))
        else:
            n = 1 if num_queries is None else check_int(num_queries, "num_queries", owner, low=1)
            object.__setattr__(self, "num_queries", n)


@dataclass(frozen=True, slots=True, eq=False)
class LaplaceNoisyMax(_VotesEventMixin, DpEvent):
    """``num_queries`` answers of report-noisy-max with Laplace noise of scale :math:`1/\\gamma` on vote counts.

    Each query releases :math:`\\arg\\max_j (n_j + \\mathrm{Lap}(1/\\gamma))` for a vote histogram
    :math:`n \\in \\mathbb{R}^C`. If one record changes the histogram by at most ``sensitivity`` in L1 norm,
    the query is :math:`\\epsilon_q`-DP with :math:`\\epsilon_q = \\mathrm{sensitivity} \\cdot \\gamma`.

    - PATE (Papernot et al., ICLR 2017): one record moves one teacher's vote, L1 change 2, so the default
      ``sensitivity=2`` gives the paper's :math:`2\\gamma` per query.
    - FedKT (Li, He, Song 2021, Theorems 1-10) carries its factors here: ``2*s`` (L1, party-level),
      ``2*z`` (L1, example-level), ``2*t`` (L2, party-level), ``2`` (L2, example-level).

    ``votes`` (queries x classes, counts >= 0) makes the analysis data-dependent (PATE 2017, Theorem 3):
    the accountant may then use the gap between the winner and the runner-up. A data-dependent epsilon is
    a function of the private votes and is *not itself* differentially private unless released with noise
    (smooth sensitivity). Without ``votes``, ``num_queries`` (default 1) gives the data-independent event.

    Neighbouring relation: replace-one at the granularity that ``sensitivity`` was derived for (one record,
    or one party's data for party-level DP).
    """

    gamma: float
    sensitivity: float = 2.0
    votes: np.ndarray | None = None
    num_queries: int | None = None

    def __post_init__(self) -> None:
        owner = "LaplaceNoisyMax"
        object.__setattr__(self, "gamma", check_float(self.gamma, "gamma", owner, low=0.0, low_open=True))
        object.__setattr__(self, "sensitivity", check_float(self.sensitivity, "sensitivity", owner, low=0.0, low_open=True))
        self._check_votes(owner)

    @property
    def query_epsilon(self) -> float:
        """Pure-DP epsilon of one query: ``sensitivity * gamma``."""
        return self.sensitivity * self.gamma


@dataclass(frozen=True, slots=True, eq=False)
class GaussianNoisyMax(_VotesEventMixin, DpEvent):
    """GNMax and Confident-GNMax queries (Papernot et al., "Scalable private learning with PATE", ICLR 2018).

    Each query releases :math:`\\arg\\max_j (n_j + \\mathcal{N}(0, \\sigma^2))`. One record moves one
    teacher's vote, so the histogram changes by at most 1 in two coordinates (L2 sensitivity :math:`\\sqrt 2`);
    the data-independent RDP of one query is :math:`\\alpha/\\sigma^2` (PATE 2018, Proposition 8).

    With ``threshold`` T (Confident-GNMax, PATE 2018 Algorithm 1), each query first checks
    :math:`\\max_j n_j + \\mathcal{N}(0, \\sigma_1^2) \\ge T` (``sigma_threshold`` = :math:`\\sigma_1`); every
    query pays for that check, only the ones that pass pay the GNMax cost.

    ``votes`` (queries x classes) makes the analysis data-dependent (not itself DP); without it
    ``num_queries`` (default 1) gives the data-independent event.
    Neighbouring relation: replace-one record (one teacher's vote changes).
    """

    sigma: float
    votes: np.ndarray | None = None
    num_queries: int | None = None
    threshold: float | None = None
    sigma_threshold: float | None = None

    def __post_init__(self) -> None:
        owner = "GaussianNoisyMax"
        object.__setattr__(self, "sigma", check_float(self.sigma, "sigma", owner, low=0.0, low_open=True))
        if (self.threshold is None) != (self.sigma_threshold is None):
            raise ParameterError(
                f"{owner} needs both 'threshold' and 'sigma_threshold' for Confident-GNMax, or neither. "
                f"Got threshold={self.threshold!r}, sigma_threshold={self.sigma_threshold!r} instead."
            )
        if self.threshold is not None:
            object.__setattr__(self, "threshold", check_float(self.threshold, "threshold", owner))
            object.__setattr__(
                self, "sigma_threshold", check_float(self.sigma_threshold, "sigma_threshold", owner, low=0.0, low_open=True)
            )
        self._check_votes(owner)


# --------------------------------------------------------------------------------------------------
# DP-SGD
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SubsampledGaussian(DpEvent):
    """``steps`` steps of the Poisson-subsampled Gaussian mechanism (DP-SGD, Abadi et al. CCS 2016).

    Each step includes every record independently with probability ``sampling_rate`` q, clips per-example
    gradients to L2 norm C and adds :math:`\\mathcal{N}(0, (\\sigma C)^2)` to their sum, with
    :math:`\\sigma` = ``noise_multiplier``. ``sampling_rate=1`` is the (full-batch) Gaussian mechanism.

    Neighbouring relation: add/remove one record (the relation Poisson subsampling analyses assume,
    as in dp_accounting and Opacus).
    """

    sampling_rate: float
    noise_multiplier: float
    steps: int = 1

    def __post_init__(self) -> None:
        owner = "SubsampledGaussian"
        object.__setattr__(self, "sampling_rate", check_float(self.sampling_rate, "sampling_rate", owner, low=0.0, high=1.0, low_open=True))
        object.__setattr__(
            self, "noise_multiplier", check_float(self.noise_multiplier, "noise_multiplier", owner, low=0.0, low_open=True)
        )
        object.__setattr__(self, "steps", check_int(self.steps, "steps", owner, low=1))


#: Neighbouring relations of the fixed-size batch samplers. ``"add-remove"``: one record added or removed (the dataset
#: size changes); ``"zero-out"``: one record replaced by a null record whose clipped gradient is zero (Kairouz et al.,
#: "Practical and private (deep) learning without sampling or shuffling", ICML 2021; the dataset size stays public);
#: ``"substitution"``: one record replaced by any other record.
NEIGHBOURING_RELATIONS = ("add-remove", "zero-out", "substitution")

#: Other spellings of the neighbouring relations, accepted wherever a relation is named (``dpaudit account
#: --neighbouring``, ``dpaudit flower ... --neighbouring``, the Python API): ``replace-one`` is ``substitution``.
RELATION_ALIASES: dict[str, str] = {"replace-one": "substitution"}


def canonical_relation(value: Any) -> Any:
    """The canonical name of a neighbouring relation (:data:`RELATION_ALIASES`); any other value unchanged (the
    caller's ``check_choice`` refuses an unknown one, naming the parameter)."""
    return RELATION_ALIASES.get(value, value) if isinstance(value, str) else value


def _check_batch_fields(event: Any, owner: str) -> None:
    """The fields the fixed-size batch events share (dataset and batch sizes, noise multiplier, steps), checked and
    set in place on the frozen ``event``."""
    n = check_int(event.dataset_size, "dataset_size", owner, low=1)
    b = check_int(event.batch_size, "batch_size", owner, low=1)
    if b > n:
        raise ParameterError(f"The 'batch_size' parameter of {owner} must be an int <= dataset_size ({n}). Got {b} instead.")
    object.__setattr__(event, "dataset_size", n)
    object.__setattr__(event, "batch_size", b)
    object.__setattr__(event, "noise_multiplier",
                       check_float(event.noise_multiplier, "noise_multiplier", owner, low=0.0, low_open=True))
    object.__setattr__(event, "steps", check_int(event.steps, "steps", owner, low=1))


@dataclass(frozen=True, slots=True)
class FixedBatchGaussian(DpEvent):
    """``steps`` steps of DP-SGD on fixed-size batches sampled without replacement.

    Each step draws a batch of exactly ``batch_size`` (B) of the ``dataset_size`` (n) records uniformly without
    replacement, independently of the other steps, clips per-example gradients to L2 norm C and adds
    :math:`\\mathcal{N}(0, (\\sigma C)^2)` to their sum (``noise_multiplier`` :math:`\\sigma`).

    Neighbouring relation (``neighbouring``), with :math:`\\gamma = B/n`:

    - ``"substitution"`` (one record replaced; n public): Wang, Balle, Kasiviswanathan, "Subsampled Rényi differential
      privacy and analytical moments accountant", AISTATS 2019, Theorem 9, for the Gaussian base mechanism whose
      substitution sensitivity is 2C (RDP :math:`2\\alpha/\\sigma^2`); dp_accounting's ``SampledWithoutReplacementDpEvent``
      with ``GaussianDpEvent(sigma / 2)`` under ``REPLACE_ONE`` is the same setting.
    - ``"add-remove"``: coupling the batch of D u {x} with that of D (x displaces one uniformly chosen member of D's
      batch), each step is a mixture, over the coupling, of the pairs :math:`((1-\\gamma)N(m, \\sigma^2C^2) +
      \\gamma N(m + v, \\sigma^2C^2),\\ N(m, \\sigma^2C^2))` with :math:`\\|v\\| \\le 2C`; by joint convexity it is
      bounded by the Poisson-subsampled Gaussian with rate :math:`\\gamma` (the larger dataset's n can only lower it)
      and noise multiplier :math:`\\sigma/2` -- a fixed batch size doubles the sensitivity under add/remove.
    - ``"zero-out"`` (the target replaced by a null record of zero gradient): analysed as ``"substitution"``, of which
      it is an instance. The coupling above does NOT reduce it to a Poisson pair: the target's presence also displaces
      another record, so one step can be :math:`(1-\\gamma)N(0, \\sigma^2C^2) + \\gamma N(2C, \\sigma^2C^2)` against
      :math:`(1-\\gamma)N(0, \\sigma^2C^2) + \\gamma N(C, \\sigma^2C^2)`, whose tail is the unsampled Gaussian's
      (:func:`dpaudit.accountants.sampling.rdp_fixed_batch`). With B = n it is the Gaussian mechanism of sensitivity C.
    """

    dataset_size: int
    batch_size: int
    noise_multiplier: float
    steps: int = 1
    neighbouring: str = "add-remove"

    def __post_init__(self) -> None:
        owner = "FixedBatchGaussian"
        _check_batch_fields(self, owner)
        object.__setattr__(self, "neighbouring", check_choice(self.neighbouring, "neighbouring", owner, NEIGHBOURING_RELATIONS))

    @property
    def sampling_rate(self) -> float:
        """:math:`\\gamma = B / n`."""
        return self.batch_size / self.dataset_size


@dataclass(frozen=True, slots=True)
class ShuffledBatchGaussian(DpEvent):
    """``steps`` steps of DP-SGD on shuffled fixed-size batches (PyTorch's ``DataLoader(shuffle=True)``).

    Every epoch the ``dataset_size`` (n) records are permuted uniformly at random and cut into consecutive batches of
    ``batch_size`` (B): T = ceil(n/B) batches, the last one shorter, or T = floor(n/B) with ``drop_last`` (the left-over
    records skip that epoch). Each step clips per-example gradients to L2 norm C and adds
    :math:`\\mathcal{N}(0, (\\sigma C)^2)` to their sum. ``first_step`` is the global index of this event's first step
    (a phase of a longer run), so that the epochs it touches are counted right.

    A record is in at most one batch per epoch, so over the epochs the steps touch it is in at most
    :attr:`participations` batches. Conditioning on the permutations (which can only help the adversary), the run is
    that many adaptive Gaussian mechanisms of sensitivity C (``"zero-out"``) or 2C (``"substitution"``): mu-GDP with
    :math:`\\mu = s\\sqrt{P}/\\sigma`, exact for deterministic batches and a valid upper bound with shuffling, which
    amplifies by an amount no known analysis certifies. Chua et al., "How private are DP-SGD implementations?",
    ICML 2024, give lower bounds showing the Poisson figure can be far below the truth.

    Neighbouring relation (``neighbouring``): ``"zero-out"`` (default: one record replaced by a null record with zero
    gradient, the relation of Chua et al.'s comparison; for Poisson sampling it gives the same pair as add/remove) or
    ``"substitution"``. Add/remove is not offered: adding a record changes the number of batches per epoch, which
    the output reveals.
    """

    dataset_size: int
    batch_size: int
    noise_multiplier: float
    steps: int = 1
    drop_last: bool = False
    first_step: int = 0
    neighbouring: str = "zero-out"

    def __post_init__(self) -> None:
        owner = "ShuffledBatchGaussian"
        _check_batch_fields(self, owner)
        object.__setattr__(self, "drop_last", check_bool(self.drop_last, "drop_last", owner))
        object.__setattr__(self, "first_step", check_int(self.first_step, "first_step", owner, low=0))
        if self.neighbouring == "add-remove":
            raise ParameterError(f"The 'neighbouring' parameter of {owner} must be one of 'zero-out', 'substitution'. Got "
                                 "'add-remove' instead (adding a record changes the number of batches per epoch, which "
                                 "the training reveals; use zero-out, the fixed-size counterpart of add/remove).")
        object.__setattr__(self, "neighbouring", check_choice(self.neighbouring, "neighbouring", owner, ("zero-out", "substitution")))

    @property
    def batches_per_epoch(self) -> int:
        """T: ceil(n/B), or floor(n/B) with ``drop_last``."""
        n, b = self.dataset_size, self.batch_size
        return n // b if self.drop_last else -(-n // b)

    @property
    def participations(self) -> int:
        """Most batches one record is in: the number of epochs the steps touch."""
        t = self.batches_per_epoch
        return (self.first_step + self.steps - 1) // t - self.first_step // t + 1

    @property
    def sensitivity(self) -> float:
        """Sensitivity of the clipped-gradient sum in units of C: 1 (zero-out) or 2 (substitution)."""
        return 1.0 if self.neighbouring == "zero-out" else 2.0


def tnb_expected_runs(eta: float, gamma: float) -> float:
    """E[K] of the truncated negative binomial :math:`\\mathcal{D}_{\\eta,\\gamma}` (Papernot & Steinke 2022, Sec. 2):
    :math:`\\eta(1-\\gamma)/(\\gamma(1-\\gamma^\\eta))`, and :math:`(1/\\gamma - 1)/\\log(1/\\gamma)` at :math:`\\eta = 0`."""
    x = eta * math.log(gamma)
    if abs(x) < 1e-8:     # eta / (-expm1(x)) = 1 / (-log(gamma) (1 + x/2 + ...)): no 0/0 for a subnormal eta
        return (1.0 / gamma - 1.0) / (math.log(1.0 / gamma) * (1.0 + x / 2.0))
    return eta * (1.0 - gamma) / (gamma * -math.expm1(x))


@dataclass(frozen=True, slots=True)
class RandomStoppingTuning(DpEvent):
    """Hyperparameter tuning by random stopping: ``event`` (one training run, candidate hyperparameters drawn
    independently of the data) is run K times, K random and independent of the data, and only the best run (by a
    score the run itself outputs) is released.

    ``distribution``:

    - ``"truncated-negative-binomial"``: :math:`K \\sim \\mathcal{D}_{\\eta,\\gamma}` on {1, 2, ...} with
      :math:`P[K=k] \\propto (1-\\gamma)^k \\binom{k+\\eta-1}{k}`, ``eta`` > -1 and ``gamma`` in (0, 1); ``eta = 1`` is
      the geometric distribution, ``eta = 0`` the logarithmic one. Papernot & Steinke, "Hyperparameter tuning with
      Rényi differential privacy", ICLR 2022, Theorem 2.
    - ``"poisson"``: K ~ Poisson(``mu``) (nothing is released when K = 0), ``mu`` >= 1. Ibid., Theorem 6 (below one
      expected run its bound falls under the exact divergence of a concrete best-of-K mechanism, so it is refused).

    Neighbouring relation: that of ``event``.
    """

    event: DpEvent
    distribution: str
    mu: float | None = None
    eta: float | None = None
    gamma: float | None = None

    def __post_init__(self) -> None:
        owner = "RandomStoppingTuning"
        if not isinstance(self.event, DpEvent):
            raise ParameterError(f"The 'event' parameter of {owner} must be a DpEvent. Got {self.event!r:.80} instead.")
        dist = check_choice(self.distribution, "distribution", owner, ("poisson", "truncated-negative-binomial"))
        object.__setattr__(self, "distribution", dist)
        if dist == "poisson":
            if self.eta is not None or self.gamma is not None:
                raise ParameterError(f"The Poisson distribution of {owner} takes 'mu' only. Got eta={self.eta!r}, "
                                     f"gamma={self.gamma!r} instead.")
            # mu >= 1: below one expected run, Theorem 6's epsilon' = eps + mu delta_hat + log(mu)/(lambda - 1) goes
            # below the exact Rényi divergence of a concrete best-of-K mechanism (measured in tests/accountants/
            # test_tuning.py with binary randomized response at mu = 0.5 and 0.9), so it is not used there
            object.__setattr__(self, "mu", check_float(self.mu, "mu", owner, low=1.0, high=1e12))
        else:
            if self.mu is not None:
                raise ParameterError(f"The truncated negative binomial of {owner} takes 'eta' and 'gamma', not 'mu'. "
                                     f"Got mu={self.mu!r} instead.")
            object.__setattr__(self, "eta", check_float(self.eta, "eta", owner, low=-1.0, high=1e6, low_open=True))
            object.__setattr__(self, "gamma", check_float(self.gamma, "gamma", owner, low=1e-12, high=1.0, high_open=True))

    @property
    def expected_runs(self) -> float:
        """E[K]."""
        if self.distribution == "poisson":
            return float(self.mu)  # type: ignore[arg-type]
        return tnb_expected_runs(float(self.eta), float(self.gamma))  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------
# Combinators
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Composed(DpEvent):
    """Adaptive sequential composition of ``events`` (in order). An empty tuple costs nothing."""

    events: tuple[DpEvent, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        evs = tuple(self.events) if isinstance(self.events, (list, tuple)) else self.events
        if not isinstance(evs, tuple) or not all(isinstance(e, DpEvent) for e in evs):
            raise ParameterError(f"The 'events' parameter of Composed must be a sequence of DpEvent. Got {self.events!r:.80} instead.")
        object.__setattr__(self, "events", evs)


@dataclass(frozen=True, slots=True)
class Repeated(DpEvent):
    """``count`` adaptive compositions of the same ``event``."""

    event: DpEvent
    count: int

    def __post_init__(self) -> None:
        if not isinstance(self.event, DpEvent):
            raise ParameterError(f"The 'event' parameter of Repeated must be a DpEvent. Got {self.event!r:.80} instead.")
        object.__setattr__(self, "count", check_int(self.count, "count", "Repeated", low=0))


@dataclass(frozen=True, slots=True)
class Shuffled(DpEvent):
    """``num_users`` users each apply the pure-LDP ``ldp_event`` once; a shuffler releases the multiset.

    This is a *central* guarantee about the shuffled output (amplification by shuffling: Feldman,
    McMillan, Talwar, "Hiding among the clones", FOCS 2021), not a local one: it needs a trusted shuffler
    and holds for replace-one neighbouring datasets of the ``num_users`` users' inputs.
    """

    ldp_event: DpEvent
    num_users: int

    def __post_init__(self) -> None:
        if not isinstance(self.ldp_event, RandomizedResponse):
            raise ParameterError(
                "The 'ldp_event' parameter of Shuffled must be a pure-LDP event (RandomizedResponse). "
                f"Got {type(self.ldp_event).__name__} instead."
            )
        object.__setattr__(self, "num_users", check_int(self.num_users, "num_users", "Shuffled", low=1))

    @property
    def local_epsilon(self) -> float:
        return self.ldp_event.report_epsilon  # type: ignore[attr-defined]


def flatten(event: DpEvent) -> list[tuple[DpEvent, int]]:
    """Flatten ``Composed``/``Repeated`` into ``[(leaf_event, count), ...]`` (counts > 0 only)."""
    out: list[tuple[DpEvent, int]] = []

    def walk(ev: DpEvent, mult: int) -> None:
        if mult == 0:
            return
        if isinstance(ev, Composed):
            for sub in ev.events:
                walk(sub, mult)
        elif isinstance(ev, Repeated):
            walk(ev.event, mult * ev.count)
        else:
            out.append((ev, mult))

    walk(event, 1)
    return out


def as_event(events: DpEvent | Sequence[DpEvent]) -> DpEvent:
    """A single event from one event or a sequence of them (composed)."""
    if isinstance(events, DpEvent):
        return events
    return Composed(tuple(events))

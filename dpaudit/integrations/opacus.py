"""Opacus interop: what a ``PrivacyEngine`` did, as dpaudit events, a ledger and an accounted statement.

Opacus's accountants keep a *history* ``[(noise_multiplier, sample_rate, num_steps), ...]`` (one entry per phase
of constant parameters; ``RDPAccountant``, ``PRVAccountant`` and ``GaussianAccountant`` alike). Each phase is the
dpaudit event ``SubsampledGaussian(sample_rate, noise_multiplier, num_steps)``, so

* :func:`read_opacus` turns an engine (or its accountant, or a bare history) into an :class:`OpacusRun`;
* :class:`OpacusRecorder` records the same phases itself during training, through the optimizer's step hook
  (chained after Opacus's own accountant hook), for code that does not keep the engine;
* :meth:`OpacusRun.account` gives every valid route (dpaudit's RDP accountant on Opacus's order grid
  ``RDPAccountant.DEFAULT_ALPHAS``, dp_accounting's PLD, PRV), the smallest the headline, with "Opacus's own
  figure" beside them: ``get_epsilon`` of the accountant the engine actually used (``PrivacyEngine()`` defaults to
  PRV; ``facts["opacus_epsilon"]`` and ``facts["opacus_epsilon_accountant"]``), and Opacus's RDP figure in
  ``facts["opacus_rdp_epsilon"]``;
* :meth:`OpacusRun.ledger` / :func:`write_opacus_ledger` give the dpaudit ledger JSON.

What Opacus's accounting assumes, and what :meth:`OpacusRun.assumptions` / :meth:`OpacusRun.red_flags` say:
every step samples each record independently with probability ``sample_rate`` (Poisson sampling -- Opacus's
``DPDataLoader``, the default ``poisson_sampling=True``); neighbouring datasets differ in one *record*
(add/remove), so it says nothing about users with several records; ``sample_rate`` is ``1 / len(data_loader)``
fixed at ``make_private`` time. With ``poisson_sampling=False`` Opacus keeps the original fixed-size shuffled
batches but still accounts them as Poisson sampling: that analysis does not cover the training that ran.

dpaudit accounts the sampler it sees (:func:`loader_sampling`): Poisson as Opacus does; a ``DataLoader`` with
``shuffle=True`` (``RandomSampler`` without replacement) as shuffled fixed-size batches
(:class:`~dpaudit.accountants.events.ShuffledBatchGaussian`: the valid no-amplification upper bound, with Chua et al.'s
lower bound and Opacus's Poisson figure beside it, named as not a guarantee); ``shuffle=False`` as deterministic batches
(the same bound, exact). Only a sampler it cannot recognise is accounted as Poisson and raises the red flag.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from dpaudit._io import write_json
from dpaudit.accountants.dpsgd import SAMPLING_NAMES, dpsgd_routes
from dpaudit.accountants.events import Composed, DpEvent, Repeated, ShuffledBatchGaussian, SubsampledGaussian
from dpaudit.accountants.ledger import PrivacyLedger
from dpaudit.accountants.rdp import EdgeOrderWarning, rdp_to_epsilon
from dpaudit.accountants.sampling import shuffle_lower_bound
from dpaudit.accountants.statement import AccountingResult, PrivacyStatement, headline_facts, pick_headline
from dpaudit.errors import DataError, DPAuditError, ParameterError, check_float, check_int, check_probability, format_value

__all__ = ["OPACUS_ORDERS", "OpacusRun", "OpacusRecorder", "read_opacus", "is_poisson_loader", "write_opacus_ledger",
           "OPACUS_ASSUMPTIONS", "loader_sampling", "OPACUS_SAMPLINGS", "OPACUS_ACCOUNTANTS", "OpacusRecipe",
           "OpacusModel", "OPACUS_OPTIMIZERS"]

#: What :func:`loader_sampling` can report: ``poisson`` (Opacus's DPDataLoader), ``shuffle`` (DataLoader(shuffle=True)),
#: ``sequential`` (DataLoader(shuffle=False): deterministic batches), ``unknown`` (any other sampler).
OPACUS_SAMPLINGS = ("poisson", "shuffle", "sequential", "unknown")


#: Opacus's accountants (``PrivacyEngine(accountant=...)``, ``IAccountant.mechanism()``) by name; ``prv`` is the
#: default of ``PrivacyEngine()`` (opacus 1.5 - 1.6).
OPACUS_ACCOUNTANTS = {"rdp": "RDPAccountant", "prv": "PRVAccountant", "gdp": "GaussianAccountant"}

#: Opacus's RDP order grid, ``opacus.accountants.RDPAccountant.DEFAULT_ALPHAS`` (opacus 1.4 - 1.6; a test checks it
#: against the installed Opacus). Spelled out so that importing this module does not import Opacus (seconds).
OPACUS_ORDERS: tuple[float, ...] = tuple([1 + x / 10.0 for x in range(1, 100)] + [float(a) for a in range(12, 64)])

OPACUS_ASSUMPTIONS = (
    "Opacus DP-SGD: per-sample gradients clipped to max_grad_norm, Gaussian noise of std noise_multiplier * "
    "max_grad_norm added to their sum at every optimizer step.",
    "Record-level DP: neighbouring datasets differ by adding or removing one record (one row of the training "
    "set); users or parties contributing several records are not covered.",
    "Every step samples each record independently with probability sample_rate (Poisson sampling, Opacus's "
    "DPDataLoader); sample_rate is 1 / len(data_loader) fixed when make_private ran.",
    "Only the optimizer steps are accounted: hyper-parameter tuning, early stopping on private data, and any "
    "other use of the data (e.g. non-private pre-processing) are not.",
)


#: Most optimizer steps of one phase: beyond it the accounting would overflow floating point (refused, never NaN).
MAX_STEPS = 10**15


def _check_history(history: Any, where: str = "the Opacus history") -> tuple[tuple[float, float, int], ...]:
    """Each phase ``(noise_multiplier > 0, sample_rate in (0, 1], steps)`` with ``steps`` a positive integer: a
    fractional (1.5), textual ("5") or NaN step count is refused, never truncated (truncating would under-account)."""
    if not isinstance(history, (list, tuple)):
        raise DataError(f"{where} must be a list of (noise_multiplier, sample_rate, steps). "
                        f"Got {type(history).__name__} instead.")
    out = []
    for i, entry in enumerate(history):
        if not isinstance(entry, (list, tuple)) or len(entry) != 3:
            raise DataError(f"Entry {i} of {where} must be (noise_multiplier, sample_rate, steps). Got {format_value(entry)} instead.")
        sigma, q, steps = entry
        out.append((check_float(sigma, f"history[{i}].noise_multiplier", where, low=0.0, low_open=True),
                    check_float(q, f"history[{i}].sample_rate", where, low=0.0, high=1.0, low_open=True),
                    check_int(steps, f"history[{i}].steps", where, low=1, high=MAX_STEPS)))
    return tuple(out)


def is_poisson_loader(data_loader: Any) -> bool:
    """Whether ``data_loader`` samples by Poisson sampling (Opacus's ``DPDataLoader`` or its uniform samplers)."""
    from opacus.data_loader import DPDataLoader
    from opacus.utils.uniform_sampler import DistributedUniformWithReplacementSampler, UniformWithReplacementSampler

    if isinstance(data_loader, DPDataLoader):
        return True
    sampler = getattr(data_loader, "batch_sampler", None)
    return isinstance(sampler, (UniformWithReplacementSampler, DistributedUniformWithReplacementSampler))


def loader_sampling(data_loader: Any) -> dict[str, Any]:
    """How ``data_loader`` samples its batches: ``{"sampling": one of OPACUS_SAMPLINGS, "dataset_size",
    "batch_size", "drop_last", "batches_per_epoch"}`` (sizes ``None`` where the loader does not say)."""
    from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

    out: dict[str, Any] = {"sampling": "unknown", "dataset_size": None, "batch_size": None, "drop_last": False,
                           "batches_per_epoch": None}
    if is_poisson_loader(data_loader):
        out["sampling"] = "poisson"
        return out
    dataset = getattr(data_loader, "dataset", None)
    try:
        n = len(dataset)  # type: ignore[arg-type]
        out["batches_per_epoch"] = len(data_loader)
    except TypeError:      # an iterable-style dataset has no length: nothing can be said about its batches
        return out
    batch_sampler = getattr(data_loader, "batch_sampler", None)
    if type(batch_sampler) is not BatchSampler:
        return out
    sampler = batch_sampler.sampler
    out.update(dataset_size=n, batch_size=int(batch_sampler.batch_size), drop_last=bool(batch_sampler.drop_last))
    if type(sampler) is RandomSampler and not sampler.replacement and sampler.num_samples == n:
        out["sampling"] = "shuffle"
    elif type(sampler) is SequentialSampler:
        out["sampling"] = "sequential"
    return out


@dataclass(frozen=True)
class OpacusRun:
    """What an Opacus training run did: its phases ``(noise_multiplier, sample_rate, steps)``, which Opacus
    accountant kept them, whether its data loader was seen to be Poisson (``None``: not given) and, when a loader
    was seen, its sampler (``sampling``, :data:`OPACUS_SAMPLINGS`) and batch structure (``dataset_size``,
    ``batch_size``, ``drop_last``)."""

    history: tuple[tuple[float, float, int], ...]
    opacus_accountant: str = "rdp"
    poisson_sampling: bool | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    sampling: str | None = None
    dataset_size: int | None = None
    batch_size: int | None = None
    drop_last: bool = False

    def __post_init__(self) -> None:
        owner = "OpacusRun"
        if not isinstance(self.history, (list, tuple)):
            raise ParameterError(f"The 'history' parameter of {owner} must be a list of (noise_multiplier, sample_rate, "
                                 f"steps). Got {self.history!r:.80} instead.")
        object.__setattr__(self, "history", _check_history(list(self.history)))
        for sigma, q, steps in self.history:   # validates every phase (named parameters, ranges)
            SubsampledGaussian(sampling_rate=q, noise_multiplier=sigma, steps=steps)
        if not isinstance(self.opacus_accountant, str) or not self.opacus_accountant:
            raise ParameterError(f"The 'opacus_accountant' parameter of {owner} must be a non-empty string. Got "
                                 f"{self.opacus_accountant!r:.80} instead.")
        # a JSON boolean or nothing: "no" or 0 must not read as "checked" (nor raise no red flag)
        if isinstance(self.poisson_sampling, np.bool_):
            object.__setattr__(self, "poisson_sampling", bool(self.poisson_sampling))
        if self.poisson_sampling is not None and not isinstance(self.poisson_sampling, bool):
            raise ParameterError(f"The 'poisson_sampling' parameter of {owner} must be true, false or null (not "
                                 f"checked). Got {self.poisson_sampling!r:.80} instead.")
        notes = self.notes
        if isinstance(notes, str) or not isinstance(notes, (list, tuple)) or not all(
                isinstance(n, str) and n.strip() for n in notes):
            raise ParameterError(f"The 'notes' parameter of {owner} must be a list of non-empty strings. Got "
                                 f"{notes!r:.80} instead.")
        object.__setattr__(self, "notes", tuple(notes))
        if self.sampling is not None and not isinstance(self.sampling, str):
            raise ParameterError(f"The 'sampling' parameter of {owner} must be one of {', '.join(OPACUS_SAMPLINGS)}. Got "
                                 f"{self.sampling!r:.40} instead.")
        if self.sampling is None and self.poisson_sampling is not None:
            # a record from before the sampler was recorded: a non-Poisson loader of unknown kind
            object.__setattr__(self, "sampling", "poisson" if self.poisson_sampling else "unknown")
        if self.sampling is not None:
            if self.sampling not in OPACUS_SAMPLINGS:
                raise DataError(f"The 'sampling' of an Opacus run must be one of {', '.join(OPACUS_SAMPLINGS)}. Got "
                                f"{self.sampling!r:.40} instead.")
            if self.poisson_sampling is not None and self.poisson_sampling != (self.sampling == "poisson"):
                raise DataError(f"An Opacus run cannot have poisson_sampling={self.poisson_sampling} with sampling="
                                f"{self.sampling!r}.")
            object.__setattr__(self, "poisson_sampling", self.sampling == "poisson")
        for name in ("dataset_size", "batch_size"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, check_int(value, name, "OpacusRun", low=1))
        if not isinstance(self.drop_last, bool):
            raise DataError(f"The 'drop_last' of an Opacus run must be true or false. Got {self.drop_last!r:.40} instead.")
        if self.dataset_size is not None and self.batch_size is not None and self.batch_size > self.dataset_size:
            raise DataError(f"The 'batch_size' of an Opacus run ({self.batch_size}) exceeds its dataset_size "
                            f"({self.dataset_size}).")

    @property
    def batches(self) -> bool:
        """Whether the run used fixed-size batches that dpaudit accounts as such (shuffled or sequential)."""
        return self.sampling in ("shuffle", "sequential")

    def _batch_structure(self) -> tuple[int, int, bool, str]:
        """(n, B, drop_last, note) of the fixed-size batches: the loader's, or, when it was not recorded, T = round(1 /
        sample_rate) batches of one record each (Opacus's rule sample_rate = 1 / len(data_loader))."""
        if self.dataset_size is not None and self.batch_size is not None:
            return self.dataset_size, self.batch_size, self.drop_last, ""
        qs = {q for _, q, _ in self.history}
        if len(qs) != 1:
            raise DataError("The Opacus run has phases with different sample rates and no recorded batch size: its "
                            "batches per epoch are unknown.")
        q = qs.pop()
        t = max(1, round(1.0 / q))
        if abs(t * q - 1.0) > 1e-6:
            raise DataError(f"The Opacus run's sample_rate {q:g} is not 1 / len(data_loader) of a fixed-size loader.")
        return t, 1, False, (f"The batch structure was not recorded: T = 1/sample_rate = {t} batches per epoch are assumed "
                             "(Opacus's rule), every record in one of them per epoch (drop_last=False).")

    def batch_events(self) -> tuple[ShuffledBatchGaussian, ...]:
        """One ``ShuffledBatchGaussian`` per phase (zero-out neighbours), first steps counted across phases."""
        n, b, drop, _ = self._batch_structure()
        out, first = [], 0
        for sigma, _, steps in self.history:
            out.append(ShuffledBatchGaussian(n, b, sigma, steps, drop_last=drop, first_step=first, neighbouring="zero-out"))
            first += steps
        return tuple(out)

    @property
    def events(self) -> tuple[DpEvent, ...]:
        """One event per phase, in order: ``SubsampledGaussian`` (Poisson, or a sampler dpaudit could not recognise,
        accounted as Opacus does) or ``ShuffledBatchGaussian`` (shuffled or sequential fixed-size batches)."""
        if self.batches:
            return self.batch_events()
        return self.poisson_events

    @property
    def poisson_events(self) -> tuple[SubsampledGaussian, ...]:
        """One ``SubsampledGaussian`` per phase: what Opacus's accountant analysed."""
        return tuple(SubsampledGaussian(sampling_rate=q, noise_multiplier=s, steps=t) for s, q, t in self.history)

    @property
    def scheme(self) -> str:
        """The sampler the accounting assumes, named for outputs."""
        if self.sampling == "sequential":
            return "deterministic fixed-size batches (no shuffling)"
        return SAMPLING_NAMES["shuffle" if self.batches else "poisson"]

    @property
    def event(self) -> Composed:
        return Composed(self.events)

    @property
    def steps(self) -> int:
        return sum(t for _, _, t in self.history)

    def red_flags(self) -> tuple[str, ...]:
        """Messages of what makes the accounted figure not a guarantee (the release flag ``sampling_not_poisson``)."""
        flags = []
        if self.sampling == "unknown":
            flags.append("The data loader does not use Poisson sampling (Opacus's poisson_sampling=False, or a "
                         "loader replaced after make_private) and dpaudit could not recognise its sampler (not "
                         "DataLoader(shuffle=True) or shuffle=False, or its batch structure was not recorded), but "
                         "Opacus's accountant analysed Poisson sampling at rate 1/len(data_loader). That analysis does "
                         "not cover this run; the epsilon below is not a guarantee for it.")
        return tuple(flags)

    def release_flags(self, delta: float) -> tuple[tuple[str, str], ...]:
        """``(code, message)`` release flags: ``sampling_not_poisson`` (red, :meth:`red_flags`) or, for fixed-size
        batches accounted as such, ``opacus_epsilon_assumes_poisson`` (a warning naming Opacus's own figure)."""
        out = [("sampling_not_poisson", m) for m in self.red_flags()]
        if self.batches and self.history:
            eps_o = self.opacus_epsilon(delta)
            out.append(("opacus_epsilon_assumes_poisson",
                        f"The run used {self.scheme}, but Opacus's own epsilon ({eps_o:.4g} at delta = {delta:g}, "
                        "PrivacyEngine.get_epsilon) analyses Poisson sampling: it is not a guarantee for this run. "
                        "dpaudit accounts the batches the run used (no amplification by shuffling counted)."))
        return tuple(out)

    def assumptions(self) -> tuple[str, ...]:
        seen = {None: "", "poisson": " The data loader was checked: Poisson.",
                "shuffle": " The data loader was checked: shuffled fixed-size batches (DataLoader(shuffle=True)), "
                           "accounted as such, not as Poisson sampling.",
                "sequential": " The data loader was checked: deterministic fixed-size batches (shuffle=False), "
                              "accounted as such, not as Poisson sampling.",
                "unknown": " The data loader was checked: NOT Poisson, and its sampler was not recognised (red flag)."}
        return OPACUS_ASSUMPTIONS[:2] + (OPACUS_ASSUMPTIONS[2] + seen[self.sampling],) + OPACUS_ASSUMPTIONS[3:] + self.notes

    @property
    def opacus_kind(self) -> str:
        """The Opacus accountant whose figure is "Opacus's own": the one the engine used (``"rdp"``, ``"prv"`` --
        the default of ``PrivacyEngine()`` -- or ``"gdp"``); ``"rdp"`` for a run read without its engine (an
        :class:`OpacusRecorder`, a bare history)."""
        return self.opacus_accountant if self.opacus_accountant in OPACUS_ACCOUNTANTS else "rdp"

    def opacus_epsilon(self, delta: float, *, runs: int = 1) -> float:
        """Opacus's own figure: ``get_epsilon(delta)`` of the accountant the engine used (:attr:`opacus_kind`) on this
        history (``runs`` times over), as ``PrivacyEngine.get_epsilon`` printed it (for comparison)."""
        from opacus.accountants import create_accountant

        acc = create_accountant(self.opacus_kind)
        acc.history = [tuple(h) for h in self.history] * runs
        return float(acc.get_epsilon(delta=delta))

    def opacus_rdp_epsilon(self, delta: float) -> float:
        """Opacus's ``RDPAccountant.get_epsilon(delta)`` on this history, whichever accountant the engine used."""
        from opacus.accountants import RDPAccountant

        acc = RDPAccountant()
        acc.history = [tuple(h) for h in self.history]
        return float(acc.get_epsilon(delta=delta))

    def opacus_rdp(self) -> np.ndarray:
        """The summed RDP of all phases at :data:`OPACUS_ORDERS`, by Opacus's own analysis
        (``opacus.accountants.analysis.rdp.compute_rdp``, the fractional-order series of TF Privacy)."""
        from opacus.accountants.analysis.rdp import compute_rdp

        total = np.zeros(len(OPACUS_ORDERS))
        for sigma, q, steps in self.history:
            total = total + np.asarray(compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=list(OPACUS_ORDERS)),
                                       dtype=np.float64)
        return total

    def account(self, delta: float, *, runs: int = 1) -> AccountingResult:
        """Every valid route at ``delta`` under the sampler the run used, the smallest the headline (named by route):

        - ``"rdp"``: dpaudit's RDP accountant on Opacus's orders (exact RDP of the sampled Gaussian at every order;
          for fixed-size batches, the no-amplification Gaussian RDP);
        - ``"pld"``: dp_accounting's PLD (for fixed-size batches the exact Gaussian-DP route);
        - ``"prv"``: the PRV accountant's certified upper bound (Poisson only).

        Beside them, not candidates for the headline: Opacus's own RDP figure (its ``compute_rdp`` series on its orders,
        converted as Opacus does: equal to ``RDPAccountant.get_epsilon``), and, for shuffled batches, Chua et al.'s
        certified lower bound in ``facts``. ``runs`` > 1: the release is the best of that many such runs (a
        hyper-parameter search), accounted as their composition.
        """
        delta = check_probability(delta, "delta", "OpacusRun.account")
        runs = check_int(runs, "runs", "OpacusRun.account", low=1)
        desc = "; ".join(f"sigma = {s:g}, q = {q:.6g}, {t} steps" for s, q, t in self.history) or "no steps"
        common = self.assumptions() + (f"Phases: {desc}.",)
        if self.batches:
            n, b, drop, note = self._batch_structure()
            common = common + ((f"Fixed-size batches: n = {n}, B = {b}, drop_last = {drop}.",) if not note else (note,))
            if self.sampling == "sequential":
                common = common + ("The loader does not shuffle (shuffle=False): the same batches every epoch, a "
                                   "special case of the shuffled-batch event, for which the no-amplification bound is "
                                   "exact.",)
        if runs > 1:
            common = common + (f"The release is the best of {runs} training runs (a hyper-parameter search): the runs "
                               "are composed; choosing the best is a post-processing of their outputs and scores.",)
        if self.history:
            eps_o, order_o = rdp_to_epsilon(OPACUS_ORDERS, runs * self.opacus_rdp(), delta, warn=False)
        else:
            eps_o, order_o = 0.0, None
        valid = "" if not self.batches else ": NOT a guarantee for this run (it analyses Poisson sampling)"
        kind = self.opacus_kind
        if kind == "rdp":
            stmts = [PrivacyStatement(
                eps_o, delta, "rdp (Opacus's RDP analysis and orders)", order=order_o,
                label=f"Opacus's own figure{valid}",
                assumptions=("RDP of each phase by Opacus's compute_rdp on RDPAccountant.DEFAULT_ALPHAS, summed, "
                             "converted with the Canonne-Kamath-Steinke 2020 bound (as Opacus); shown for comparison, "
                             "not a route dpaudit certifies.",) + common)]
        else:
            eps_own = self.opacus_epsilon(delta, runs=runs) if self.history else 0.0
            stmts = [PrivacyStatement(
                eps_own, delta, f"{kind} (Opacus's {OPACUS_ACCOUNTANTS[kind]})",
                label=f"Opacus's own figure ({OPACUS_ACCOUNTANTS[kind]}, the engine's){valid}",
                assumptions=(f"Opacus's {OPACUS_ACCOUNTANTS[kind]}.get_epsilon on the run's history, the accountant the "
                             "PrivacyEngine used (as PrivacyEngine.get_epsilon printed it); shown for comparison, not a "
                             "route dpaudit certifies.",) + common)]
        event: DpEvent = Composed(self.events)
        if runs > 1:
            event = Repeated(event, runs)
        warns: list[str] = list(self.red_flags())
        facts: dict[str, Any] = {"sampling": self.scheme, "steps": self.steps, "phases": [list(h) for h in self.history],
                                 "opacus_accountant": self.opacus_accountant,
                                 "opacus_epsilon": stmts[0].epsilon, "opacus_epsilon_accountant": kind,
                                 "opacus_rdp_epsilon": self.opacus_rdp_epsilon(delta) if runs == 1 else eps_o,
                                 "poisson_sampling_checked": self.poisson_sampling, "runs": runs}
        if self.history:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", EdgeOrderWarning)
                routes, skipped, _ = dpsgd_routes(event, delta, label=f"Opacus DP-SGD, {self.scheme}", common=common,
                                                  orders=OPACUS_ORDERS)
            stmts.extend(routes)
            for name, why in skipped.items():
                facts[f"route {name} not used"] = why
        headline = pick_headline(stmts)
        facts.update(headline_facts(stmts, headline))
        if self.batches and self.history:
            lower = shuffle_lower_bound(self._repeated_batches(runs), delta)
            facts.update({"lower_bound_epsilon": lower.epsilon, "lower_bound_construction": lower.construction})
            warns.append(
                f"{self.scheme.capitalize()}: epsilon <= {stmts[headline].epsilon:.4g} is a valid upper bound (no "
                f"amplification counted); Chua et al.'s construction certifies that no analysis can give less than "
                f"{lower.epsilon:.4g}; Opacus's own figure ({stmts[0].epsilon:.4g}) analyses Poisson sampling and is not a "
                "guarantee for this run.")
        if order_o is not None and order_o in (OPACUS_ORDERS[0], OPACUS_ORDERS[-1]):
            warns.append(f"The best RDP order of Opacus's figure ({order_o:g}) is at the edge of Opacus's order grid.")
        return AccountingResult(f"opacus dp-sgd ({self.scheme})", tuple(stmts), headline=headline,
                                parameters={"delta": delta, "orders": "opacus RDPAccountant.DEFAULT_ALPHAS",
                                            "sampling": self.sampling, "runs": runs},
                                facts=facts, warnings=tuple(warns))

    def _repeated_batches(self, runs: int) -> list[ShuffledBatchGaussian]:
        """The batch events of ``runs`` consecutive runs on the same data (each run's epochs start afresh)."""
        evs = self.batch_events()
        total = sum(e.steps for e in evs)
        t = evs[0].batches_per_epoch
        span = -(-total // t) * t
        return [ShuffledBatchGaussian(e.dataset_size, e.batch_size, e.noise_multiplier, e.steps, drop_last=e.drop_last,
                                      first_step=e.first_step + r * span, neighbouring=e.neighbouring)
                for r in range(runs) for e in evs]

    def ledger(self, delta: float, *, party: str = "all", runs: int = 1) -> PrivacyLedger:
        """A dpaudit ledger (RDP on Opacus's orders) holding every phase (``runs`` times) for ``party``."""
        led = PrivacyLedger(delta=delta, accountant="rdp", orders=OPACUS_ORDERS)
        for a in self.assumptions():
            led.add_assumption(a)
        for ev in self.events:
            led.record(party, ev, runs)
        return led

    def to_dict(self) -> dict[str, Any]:
        return {"history": [list(h) for h in self.history], "opacus_accountant": self.opacus_accountant,
                "poisson_sampling": self.poisson_sampling, "notes": list(self.notes), "sampling": self.sampling,
                "dataset_size": self.dataset_size, "batch_size": self.batch_size, "drop_last": self.drop_last}

    @classmethod
    def from_dict(cls, d: Any, *, where: str = "the Opacus run record") -> "OpacusRun":
        """From :meth:`to_dict` output (e.g. a JSON file): every field checked, unknown fields refused;
        ``poisson_sampling`` must be a JSON boolean or null. Raises :class:`DataError` naming ``where``."""
        if not isinstance(d, dict) or "history" not in d:
            raise DataError(f"{where} must be a JSON object with 'history' "
                            "([[noise_multiplier, sample_rate, steps], ...]).")
        known = ("history", "opacus_accountant", "poisson_sampling", "notes", "sampling", "dataset_size", "batch_size",
                 "drop_last")
        unknown = sorted(str(k) for k in d if k not in known)
        if unknown:
            raise DataError(f"{where} has unknown field(s) {', '.join(repr(k) for k in unknown[:5])}; its fields are "
                            f"{', '.join(known)}.")
        history = _check_history(d["history"], where)
        try:
            return cls(history, d.get("opacus_accountant", "rdp"), d.get("poisson_sampling"), d.get("notes", ()),
                       sampling=d.get("sampling"), dataset_size=d.get("dataset_size"), batch_size=d.get("batch_size"),
                       drop_last=d.get("drop_last", False))
        except DPAuditError as exc:
            raise DataError(f"{where}: {exc}") from None


def read_opacus(source: Any, *, data_loader: Any = None) -> OpacusRun:
    """Read an Opacus run from a ``PrivacyEngine``, one of its accountants (anything with ``history`` and
    ``mechanism()``), an :class:`OpacusRecorder`, or a bare history list. ``data_loader`` (the one training
    iterated) is inspected (:func:`loader_sampling`) and the run is accounted under the sampler it uses."""
    if isinstance(source, OpacusRecorder):
        history, mech = source.history, "dpaudit-recorder"
    elif isinstance(source, (list, tuple)):
        history, mech = list(source), "history"
    else:
        acc = getattr(source, "accountant", source)
        if not hasattr(acc, "history"):
            raise ParameterError("The 'source' parameter of read_opacus must be an opacus PrivacyEngine, an opacus "
                                 f"accountant, an OpacusRecorder or a history list. Got {type(source).__name__} instead.")
        history = list(acc.history)
        mech = acc.mechanism() if callable(getattr(acc, "mechanism", None)) else type(acc).__name__
    hist = tuple(tuple(h) for h in _check_history(history))
    if data_loader is None:
        return OpacusRun(hist, str(mech))
    seen = loader_sampling(data_loader)
    sampling = seen["sampling"]
    if sampling in ("shuffle", "sequential") and seen["batches_per_epoch"] and hist:
        # Opacus fixed sample_rate = 1 / len(data_loader) at make_private: the loader must be the one it saw
        if any(abs(q * seen["batches_per_epoch"] - 1.0) > 1e-6 for _, q, _ in hist):
            sampling = "unknown"
    known = sampling in ("shuffle", "sequential")
    return OpacusRun(hist, str(mech), sampling=sampling, dataset_size=seen["dataset_size"] if known else None,
                     batch_size=seen["batch_size"] if known else None, drop_last=bool(seen["drop_last"]) if known else False)


class OpacusRecorder:
    """Records each DP optimizer step ``(noise_multiplier, sample_rate * accumulated_iterations)`` through the
    optimizer's step hook, chained after any hook already attached (Opacus's own accountant keeps working).

    >>> rec = OpacusRecorder.attach(optimizer, data_loader=train_loader)   # after make_private  # doctest: +SKIP
    >>> ...train...
    >>> run = read_opacus(rec, data_loader=train_loader)                        # doctest: +SKIP
    """

    def __init__(self, sample_rate: float) -> None:
        self.sample_rate = check_probability(sample_rate, "sample_rate", "OpacusRecorder")
        self.history: list[tuple[float, float, int]] = []

    @classmethod
    def attach(cls, optimizer: Any, *, data_loader: Any = None, sample_rate: float | None = None) -> "OpacusRecorder":
        """Attach to an Opacus ``DPOptimizer``; ``sample_rate`` defaults to ``1 / len(data_loader)`` (Opacus's rule)."""
        if not hasattr(optimizer, "noise_multiplier") or not hasattr(optimizer, "attach_step_hook"):
            raise ParameterError("The 'optimizer' parameter of OpacusRecorder.attach must be an opacus DPOptimizer "
                                 f"(returned by PrivacyEngine.make_private). Got {type(optimizer).__name__} instead.")
        if sample_rate is None:
            if data_loader is None:
                raise ParameterError("OpacusRecorder.attach needs 'data_loader' or 'sample_rate'. Got neither instead.")
            try:
                batches = len(data_loader)
            except TypeError:
                raise ParameterError("The 'data_loader' parameter of OpacusRecorder.attach must have a length (Opacus's "
                                     f"sample rate is 1 / len(data_loader)). Got a {type(data_loader).__name__} "
                                     "without one; pass sample_rate= instead.") from None
            if batches < 1:
                raise ParameterError("The 'data_loader' parameter of OpacusRecorder.attach must hold at least one "
                                     "batch (Opacus's sample rate is 1 / len(data_loader)). Got an empty data loader "
                                     "instead.")
            sample_rate = 1.0 / batches
        rec = cls(sample_rate)
        previous = getattr(optimizer, "step_hook", None)

        def hook(optim: Any) -> None:
            if previous is not None:
                previous(optim)
            rec.step(float(optim.noise_multiplier), rec.sample_rate * getattr(optim, "accumulated_iterations", 1))

        optimizer.attach_step_hook(hook)
        return rec

    def step(self, noise_multiplier: float, sample_rate: float) -> None:
        if self.history and self.history[-1][:2] == (noise_multiplier, sample_rate):
            s, q, t = self.history[-1]
            self.history[-1] = (s, q, t + 1)
        else:
            self.history.append((noise_multiplier, sample_rate, 1))


def write_opacus_ledger(run: OpacusRun, path: str | Path, *, delta: float) -> Path:
    """Write the dpaudit ledger JSON of ``run`` (atomically) and return its path."""
    return write_json(path, run.ledger(delta).to_dict())


#: Optimizers an :class:`OpacusRecipe` can name (``torch.optim`` classes).
OPACUS_OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True)
class OpacusRecipe:
    """A ``PrivacyEngine`` training recipe, so that shadow / reference models are trained as the release was, without
    a hand-written ``train(X, y, seed)``: ``make_private(module=factory(), optimizer=..., data_loader=DataLoader(
    (X, y), batch_size), noise_multiplier, max_grad_norm, poisson_sampling)``, then ``epochs`` passes over the loader
    minimising cross-entropy.

    ``optimizer``: ``"sgd"`` (``torch.optim.SGD(lr, momentum, weight_decay)``) or ``"adam"`` (``torch.optim.Adam(lr,
    weight_decay)``). ``poisson_sampling``: Opacus's default (its ``DPDataLoader``); false: the loader's shuffled
    fixed-size batches. Validated at construction (a :class:`~dpaudit.errors.ParameterError` names the field).

    >>> recipe = OpacusRecipe(noise_multiplier=1.1, max_grad_norm=1.0, epochs=10, batch_size=64, lr=0.5)
    >>> train = recipe.train_fn(build)          # build() -> torch.nn.Module            # doctest: +SKIP
    >>> model = train(X, y, seed=0)             # model.predict_proba(X) -> (n, C)      # doctest: +SKIP

    In a release bundle (``dpaudit.release.make(..., factory="net.py:build", opacus_recipe=recipe)``), the recipe
    trains shadow / reference models with the bundle's own pinned factory.
    """

    noise_multiplier: float
    max_grad_norm: float
    epochs: int
    batch_size: int
    lr: float
    optimizer: str = "sgd"
    momentum: float = 0.0
    weight_decay: float = 0.0
    poisson_sampling: bool = True

    def __post_init__(self) -> None:
        owner = "OpacusRecipe"
        object.__setattr__(self, "noise_multiplier", check_float(self.noise_multiplier, "noise_multiplier", owner,
                                                                 low=0.0))
        object.__setattr__(self, "max_grad_norm", check_float(self.max_grad_norm, "max_grad_norm", owner, low=0.0,
                                                              low_open=True))
        object.__setattr__(self, "epochs", check_int(self.epochs, "epochs", owner, low=1, high=100_000))
        object.__setattr__(self, "batch_size", check_int(self.batch_size, "batch_size", owner, low=1,
                                                         high=10_000_000))
        object.__setattr__(self, "lr", check_float(self.lr, "lr", owner, low=0.0, low_open=True))
        if self.optimizer not in OPACUS_OPTIMIZERS:
            raise ParameterError(f"The 'optimizer' parameter of {owner} must be one of {', '.join(OPACUS_OPTIMIZERS)}. "
                                 f"Got {self.optimizer!r:.40} instead.")
        object.__setattr__(self, "momentum", check_float(self.momentum, "momentum", owner, low=0.0, high=1.0,
                                                         high_open=True))
        object.__setattr__(self, "weight_decay", check_float(self.weight_decay, "weight_decay", owner, low=0.0))
        if not isinstance(self.poisson_sampling, bool):
            raise ParameterError(f"The 'poisson_sampling' parameter of {owner} must be a bool. Got "
                                 f"{self.poisson_sampling!r:.40} instead.")

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)

    @classmethod
    def from_dict(cls, d: Any, *, where: str = "the Opacus recipe") -> "OpacusRecipe":
        """From :meth:`to_dict` output (a bundle's ``model.recipe.opacus``): unknown fields refused; a
        :class:`DataError` naming ``where``."""
        from dataclasses import fields

        known = [f.name for f in fields(cls)]
        if not isinstance(d, Mapping):
            raise DataError(f"{where} must be an object with the fields {', '.join(known)}.")
        unknown = sorted(str(k) for k in d if k not in known)
        if unknown:
            raise DataError(f"{where} has unknown field(s) {', '.join(repr(k) for k in unknown[:5])}; its fields are "
                            f"{', '.join(known)}.")
        try:
            return cls(**d)
        except TypeError as exc:          # a required field missing
            raise DataError(f"{where}: {exc}") from None
        except DPAuditError as exc:
            raise DataError(f"{where}: {exc}") from None

    def train_fn(self, factory: Callable[..., Any], **factory_kwargs: Any) -> Callable[..., "OpacusModel"]:
        """``train(X, y, seed) -> OpacusModel``: a fresh ``factory(**factory_kwargs)`` trained by this recipe on
        ``(X, y)``; the same seed gives the same model (torch's RNG is forked and seeded, so the caller's is
        untouched)."""
        if not callable(factory):
            raise ParameterError(f"The 'factory' parameter of OpacusRecipe.train_fn must be callable (it builds the "
                                 f"torch.nn.Module). Got {type(factory).__name__} instead.")
        recipe = self

        def train(X: Any, y: Any, seed: int) -> OpacusModel:
            return recipe._train(factory, factory_kwargs, X, y, int(seed))

        return train

    def _train(self, factory: Callable[..., Any], kwargs: Mapping[str, Any], X: Any, y: Any,
               seed: int) -> "OpacusModel":
        import torch
        from opacus import PrivacyEngine

        X = np.asarray(X, dtype=np.float32)
        y = np.asarray(y)
        if X.ndim < 2 or y.shape != (len(X),) or len(X) < 1:
            raise DataError(f"OpacusRecipe: X must be (n, ...) and y (n,). Got X {X.shape} and y {y.shape} instead.")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            module = factory(**kwargs)
            if not isinstance(module, torch.nn.Module):
                raise DataError(f"OpacusRecipe: the factory returned a {type(module).__name__}, not a torch.nn.Module.")
            data = torch.utils.data.TensorDataset(torch.from_numpy(X), torch.from_numpy(y.astype(np.int64)))
            loader = torch.utils.data.DataLoader(data, batch_size=min(self.batch_size, len(X)), shuffle=True,
                                                 generator=torch.Generator().manual_seed(seed))
            if self.optimizer == "sgd":
                opt = torch.optim.SGD(module.parameters(), lr=self.lr, momentum=self.momentum,
                                      weight_decay=self.weight_decay)
            else:
                opt = torch.optim.Adam(module.parameters(), lr=self.lr, weight_decay=self.weight_decay)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")      # Opacus's secure-RNG notice and its hooks' warnings
                model, opt, loader = PrivacyEngine(accountant="rdp").make_private(
                    module=module, optimizer=opt, data_loader=loader, noise_multiplier=self.noise_multiplier,
                    max_grad_norm=self.max_grad_norm, poisson_sampling=self.poisson_sampling)
                model.train()
                for _ in range(self.epochs):
                    for xb, yb in loader:
                        if len(xb) == 0:
                            continue
                        opt.zero_grad()
                        torch.nn.functional.cross_entropy(model(xb), yb).backward()
                        opt.step()
        return OpacusModel(module)


class OpacusModel:
    """A model an :class:`OpacusRecipe` trained: the plain ``torch.nn.Module`` (``module``, trained in place by Opacus)
    behind ``predict_proba(X) -> (n, C)`` (softmax, eval mode, batches of 4096)."""

    def __init__(self, module: Any) -> None:
        self.module = module.cpu().eval()

    def predict_proba(self, X: Any) -> np.ndarray:
        import torch

        X = np.asarray(X, dtype=np.float32)
        out = []
        with torch.no_grad():
            for i in range(0, len(X), 4096):
                out.append(torch.softmax(self.module(torch.from_numpy(X[i:i + 4096])), dim=1).double().numpy())
        return np.concatenate(out) if out else np.zeros((0, 0))

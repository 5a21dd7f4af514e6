"""Opacus interop: what a ``PrivacyEngine`` did, as dpaudit events, a ledger and an accounted statement.

Opacus's accountants keep a *history* ``[(noise_multiplier, sample_rate, num_steps), ...]`` (one entry per phase
of constant parameters; ``RDPAccountant``, ``PRVAccountant`` and ``GaussianAccountant`` alike). Each phase is the
dpaudit event ``SubsampledGaussian(sample_rate, noise_multiplier, num_steps)``, so

* :func:`read_opacus` turns an engine (or its accountant, or a bare history) into an :class:`OpacusRun`;
* :class:`OpacusRecorder` records the same phases itself during training, through the optimizer's step hook
  (chained after Opacus's own accountant hook), for code that does not keep the engine;
* :meth:`OpacusRun.account` gives the epsilon **equal to Opacus's own RDP ``get_epsilon``** (dpaudit's RDP
  accountant on Opacus's order grid ``RDPAccountant.DEFAULT_ALPHAS``; dpaudit converts with the same
  Canonne-Kamath-Steinke / Balle et al. 2020 bound) with dp_accounting's PLD figure beside it, and Opacus's own
  number in ``facts["opacus_rdp_epsilon"]``;
* :meth:`OpacusRun.ledger` / :func:`write_opacus_ledger` give the dpaudit ledger JSON.

What Opacus's accounting assumes, and what :meth:`OpacusRun.assumptions` / :meth:`OpacusRun.red_flags` say:
every step samples each record independently with probability ``sample_rate`` (Poisson sampling -- Opacus's
``DPDataLoader``, the default ``poisson_sampling=True``); neighbouring datasets differ in one *record*
(add/remove), so it says nothing about users with several records; ``sample_rate`` is ``1 / len(data_loader)``
fixed at ``make_private`` time. With ``poisson_sampling=False`` Opacus keeps the original fixed-size shuffled
batches but still accounts them as Poisson sampling: that analysis does not cover the training that ran
(a red flag, raised when the data loader is given and is not Poisson).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit._io import write_json
from dpaudit.accountants.events import Composed, SubsampledGaussian
from dpaudit.accountants.ledger import PrivacyLedger
from dpaudit.accountants.pld import PldAccountant
from dpaudit.accountants.rdp import EdgeOrderWarning, RdpAccountant, rdp_to_epsilon
from dpaudit.accountants.statement import AccountingResult, PrivacyStatement
from dpaudit.errors import DataError, DPAuditError, ParameterError, check_float, check_int, check_probability

__all__ = ["OPACUS_ORDERS", "OpacusRun", "OpacusRecorder", "read_opacus", "is_poisson_loader", "write_opacus_ledger",
           "OPACUS_ASSUMPTIONS"]


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
            raise DataError(f"Entry {i} of {where} must be (noise_multiplier, sample_rate, steps). Got {entry!r:.60} instead.")
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


@dataclass(frozen=True)
class OpacusRun:
    """What an Opacus training run did: its phases ``(noise_multiplier, sample_rate, steps)``, which Opacus
    accountant kept them, and whether its data loader was seen to be Poisson (``None``: not given)."""

    history: tuple[tuple[float, float, int], ...]
    opacus_accountant: str = "rdp"
    poisson_sampling: bool | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

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

    @property
    def events(self) -> tuple[SubsampledGaussian, ...]:
        """One ``SubsampledGaussian`` per phase, in order."""
        return tuple(SubsampledGaussian(sampling_rate=q, noise_multiplier=s, steps=t) for s, q, t in self.history)

    @property
    def event(self) -> Composed:
        return Composed(self.events)

    @property
    def steps(self) -> int:
        return sum(t for _, _, t in self.history)

    def red_flags(self) -> tuple[str, ...]:
        flags = []
        if self.poisson_sampling is False:
            flags.append("The data loader does not use Poisson sampling (Opacus's poisson_sampling=False, or a "
                         "loader replaced after make_private): the training ran on fixed-size shuffled batches, but "
                         "Opacus's accountant analysed Poisson sampling at rate 1/len(data_loader). That analysis does "
                         "not cover this run; the epsilon below is not a guarantee for it.")
        return tuple(flags)

    def assumptions(self) -> tuple[str, ...]:
        seen = "" if self.poisson_sampling is None else (
            " The data loader was checked: Poisson." if self.poisson_sampling else
            " The data loader was checked: NOT Poisson (red flag).")
        return OPACUS_ASSUMPTIONS[:2] + (OPACUS_ASSUMPTIONS[2] + seen,) + OPACUS_ASSUMPTIONS[3:] + self.notes

    def opacus_epsilon(self, delta: float) -> float:
        """Opacus's own ``RDPAccountant.get_epsilon(delta)`` on this history (for comparison)."""
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

    def account(self, delta: float) -> AccountingResult:
        """Three figures at ``delta``, headline first:

        1. Opacus's RDP (its own RDP values on its orders, converted with the bound Opacus uses --
           Canonne-Kamath-Steinke 2020 / Balle et al. 2020 -- by :func:`~dpaudit.accountants.rdp.rdp_to_epsilon`):
           equal to Opacus's ``RDPAccountant.get_epsilon(delta)``;
        2. dpaudit's RDP accountant (dp_accounting's RDP of the sampled Gaussian, same orders): at fractional orders
           it is slightly larger than Opacus's series, so it may exceed figure 1 in the fifth digit;
        3. dp_accounting's PLD (tighter; pessimistic discretisation).
        """
        delta = check_probability(delta, "delta", "OpacusRun.account")
        desc = "; ".join(f"sigma = {s:g}, q = {q:.6g}, {t} steps" for s, q, t in self.history) or "no steps"
        common = self.assumptions() + (f"Phases: {desc}.",)
        if self.history:
            eps_o, order_o = rdp_to_epsilon(OPACUS_ORDERS, self.opacus_rdp(), delta, warn=False)
        else:
            eps_o, order_o = 0.0, None
        stmts = [PrivacyStatement(
            eps_o, delta, "rdp (Opacus's RDP analysis and orders)", order=order_o, label="Opacus DP-SGD (Opacus RDP)",
            assumptions=("RDP of each phase by Opacus's compute_rdp on RDPAccountant.DEFAULT_ALPHAS, summed, converted "
                         "with the Canonne-Kamath-Steinke 2020 bound (as Opacus).",) + common)]
        rdp = RdpAccountant(OPACUS_ORDERS)
        pld = PldAccountant()
        for ev in self.events:
            rdp.compose(ev)
            pld.compose(ev)
        for name, acc in (("dpaudit rdp", rdp), ("pld", pld)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", EdgeOrderWarning)
                st = acc.get_statement(delta)
            stmts.append(PrivacyStatement(st.epsilon, st.delta, st.method, order=st.order,
                                          label=f"Opacus DP-SGD ({name})", assumptions=st.assumptions + common,
                                          details=st.details))
        facts = {"steps": self.steps, "phases": [list(h) for h in self.history],
                 "opacus_accountant": self.opacus_accountant, "opacus_rdp_epsilon": self.opacus_epsilon(delta),
                 "poisson_sampling_checked": self.poisson_sampling}
        warns = list(self.red_flags())
        if order_o is not None and order_o in (OPACUS_ORDERS[0], OPACUS_ORDERS[-1]):
            warns.append(f"The best RDP order ({order_o:g}) is at the edge of Opacus's order grid; a wider grid may "
                         "give a smaller epsilon.")
        return AccountingResult("opacus dp-sgd (Poisson-subsampled Gaussian)", tuple(stmts), headline=0,
                                parameters={"delta": delta, "orders": "opacus RDPAccountant.DEFAULT_ALPHAS"},
                                facts=facts, warnings=tuple(warns))

    def ledger(self, delta: float, *, party: str = "all") -> PrivacyLedger:
        """A dpaudit ledger (RDP on Opacus's orders) holding every phase for ``party``."""
        led = PrivacyLedger(delta=delta, accountant="rdp", orders=OPACUS_ORDERS)
        for a in self.assumptions():
            led.add_assumption(a)
        for ev in self.events:
            led.record(party, ev)
        return led

    def to_dict(self) -> dict[str, Any]:
        return {"history": [list(h) for h in self.history], "opacus_accountant": self.opacus_accountant,
                "poisson_sampling": self.poisson_sampling, "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, d: Any, *, where: str = "the Opacus run record") -> "OpacusRun":
        """From :meth:`to_dict` output (e.g. a JSON file): every field checked, unknown fields refused;
        ``poisson_sampling`` must be a JSON boolean or null. Raises :class:`DataError` naming ``where``."""
        if not isinstance(d, dict) or "history" not in d:
            raise DataError(f"{where} must be a JSON object with 'history' "
                            "([[noise_multiplier, sample_rate, steps], ...]).")
        known = ("history", "opacus_accountant", "poisson_sampling", "notes")
        unknown = sorted(str(k) for k in d if k not in known)
        if unknown:
            raise DataError(f"{where} has unknown field(s) {', '.join(repr(k) for k in unknown[:5])}; its fields are "
                            f"{', '.join(known)}.")
        history = _check_history(d["history"], where)
        try:
            return cls(history, d.get("opacus_accountant", "rdp"), d.get("poisson_sampling"), d.get("notes", ()))
        except DPAuditError as exc:
            raise DataError(f"{where}: {exc}") from None


def read_opacus(source: Any, *, data_loader: Any = None) -> OpacusRun:
    """Read an Opacus run from a ``PrivacyEngine``, one of its accountants (anything with ``history`` and
    ``mechanism()``), an :class:`OpacusRecorder`, or a bare history list. ``data_loader`` (the one training
    iterated) is checked for Poisson sampling."""
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
    poisson = None if data_loader is None else is_poisson_loader(data_loader)
    return OpacusRun(tuple(tuple(h) for h in _check_history(history)), str(mech), poisson)


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

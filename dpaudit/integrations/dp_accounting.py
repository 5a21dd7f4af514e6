"""dpaudit events <-> dp_accounting ``DpEvent``s, both directions.

========================================  ======================================================================
dpaudit                                   dp_accounting
========================================  ======================================================================
``SubsampledGaussian(q, sigma, 1)``       ``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))`` (``q = 1``: the bare
                                          ``GaussianDpEvent(sigma)``)
``SubsampledGaussian(q, sigma, T)``       ``SelfComposedDpEvent(<the above>, T)``
``RandomizedResponse(C, 1, beta)``        ``RandomizedResponseDpEvent(noise_parameter=1 - beta, num_buckets=C)``
``RandomizedResponse(C, K, beta)``        ``SelfComposedDpEvent(<the above>, K)`` (K labels, each its own RR)
``Repeated(e, n)``                        ``SelfComposedDpEvent(to(e), n)``
``Composed([e1, ...])``                   ``ComposedDpEvent([to(e1), ...])``; ``NoOpDpEvent`` reads as ``Composed(())``
``FixedBatchGaussian(n, B, sigma, T,      ``SelfComposedDpEvent(SampledWithoutReplacementDpEvent(n, B,
neighbouring="substitution")``            GaussianDpEvent(sigma / 2)), T)`` (REPLACE_ONE; dp_accounting's noise is
                                          relative to the replace-one sensitivity, 2C for a clipped-gradient sum)
``GaussianNoisyMax(sigma)`` (no votes)    one way only: ``GaussianDpEvent(sigma / sqrt 2)`` per query (GNMax is the
                                          argmax of the Gaussian mechanism on the vote histogram, L2 sensitivity
                                          sqrt 2), plus ``GaussianDpEvent(sigma_threshold)`` per query for
                                          Confident-GNMax's check (sensitivity 1) -- the data-independent bound
========================================  ======================================================================

No counterpart (refused with a :class:`~dpaudit.errors.ParameterError` naming the event): data-dependent events
(``votes``), ``LaplaceNoisyMax`` (dp_accounting has no report-noisy-max event, and its ``LaplaceDpEvent`` is the
Laplace *mechanism*, whose privacy-loss distribution does not dominate noisy max's worst case), ``Shuffled``,
``ShuffledBatchGaussian``, ``FixedBatchGaussian`` under add/remove or zero-out (dp_accounting's without-replacement
event is replace-one only); from dp_accounting, ``LaplaceDpEvent``, sampling with replacement, sampling without
replacement of anything but a Gaussian, zCDP, tree aggregation, ``NonPrivateDpEvent`` and ``UnsupportedDpEvent``.

Both conversions are exact for the table's rows: ``to_dp_accounting(from_dp_accounting(e)) == e`` for every
dp_accounting event in the image of ``to_dp_accounting``, and ``from_dp_accounting(to_dp_accounting(e))`` is ``e``
up to the representation of randomized response (``epsilon=`` becomes the equal ``keep_probability=``) and the
merging of ``Repeated(SubsampledGaussian(q, sigma, 1), n)`` into ``SubsampledGaussian(q, sigma, n)``.
Neighbouring relations: dp_accounting's Poisson-sampled Gaussian is add/remove (as dpaudit's
``SubsampledGaussian``); randomized response is replace-one in both.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import dp_accounting

from dpaudit.accountants.events import (Composed, DpEvent, FixedBatchGaussian, GaussianNoisyMax, RandomizedResponse,
                                        Repeated, SubsampledGaussian, flatten)
from dpaudit.accountants.ledger import PrivacyLedger
from dpaudit.errors import ParameterError, check_int, format_value

__all__ = ["to_dp_accounting", "from_dp_accounting", "ledger_from_dp_accounting", "dp_event_to_json", "dp_event_from_json",
           "MAX_COMPOSITIONS"]

#: Most mechanism applications one converted event may compose (counts multiplied through nested
#: ``SelfComposedDpEvent``s, times a leaf's steps): beyond it the accounting would overflow floating point, so the
#: event is refused with a range error instead of an epsilon that is not a number.
MAX_COMPOSITIONS = 10**15


def _no_counterpart(what: str, why: str) -> ParameterError:
    return ParameterError(f"{what} has no counterpart: {why}")


def to_dp_accounting(event: DpEvent) -> "dp_accounting.DpEvent":
    """The dp_accounting ``DpEvent`` describing the same mechanism as the dpaudit ``event`` (see the module table)."""
    if not isinstance(event, DpEvent):
        raise ParameterError(f"The 'event' parameter of to_dp_accounting must be a dpaudit DpEvent. Got {type(event).__name__} instead.")
    if isinstance(event, SubsampledGaussian):
        one: Any = dp_accounting.GaussianDpEvent(event.noise_multiplier)
        if event.sampling_rate < 1.0:
            one = dp_accounting.PoissonSampledDpEvent(event.sampling_rate, one)
        return one if event.steps == 1 else dp_accounting.SelfComposedDpEvent(one, event.steps)
    if isinstance(event, FixedBatchGaussian) and event.neighbouring == "substitution":
        one = dp_accounting.SampledWithoutReplacementDpEvent(event.dataset_size, event.batch_size,
                                                             dp_accounting.GaussianDpEvent(event.noise_multiplier / 2.0))
        return one if event.steps == 1 else dp_accounting.SelfComposedDpEvent(one, event.steps)
    if isinstance(event, RandomizedResponse):
        one = dp_accounting.RandomizedResponseDpEvent(noise_parameter=1.0 - event.beta, num_buckets=event.num_classes)
        return one if event.num_samples == 1 else dp_accounting.SelfComposedDpEvent(one, event.num_samples)
    if isinstance(event, Repeated):
        return dp_accounting.SelfComposedDpEvent(to_dp_accounting(event.event), event.count)
    if isinstance(event, Composed):
        return dp_accounting.ComposedDpEvent([to_dp_accounting(e) for e in event.events])
    if isinstance(event, GaussianNoisyMax):
        if event.votes is not None:
            raise _no_counterpart("A data-dependent GaussianNoisyMax (with votes)",
                                  "dp_accounting has no data-dependent PATE analysis; drop the votes for the "
                                  "data-independent bound.")
        per_query: Any = dp_accounting.GaussianDpEvent(event.sigma / math.sqrt(2.0))
        if event.threshold is not None:
            per_query = dp_accounting.ComposedDpEvent(
                [dp_accounting.GaussianDpEvent(event.sigma_threshold), per_query])
        return per_query if event.num_queries == 1 else dp_accounting.SelfComposedDpEvent(per_query, event.num_queries)
    name = type(event).__name__
    why = {"LaplaceNoisyMax": "dp_accounting has no report-noisy-max event, and its LaplaceDpEvent (the Laplace "
                              "mechanism) does not dominate noisy max's worst case, so no conversion is safe.",
           "Shuffled": "dp_accounting has no amplification-by-shuffling event.",
           "ShuffledBatchGaussian": "dp_accounting has no shuffled-batch event.",
           "FixedBatchGaussian": "dp_accounting's SampledWithoutReplacementDpEvent is replace-one only (use "
                                 "neighbouring='substitution')."}.get(name, "unknown to dp_accounting.")
    raise _no_counterpart(f"The dpaudit event {name}", why)


def from_dp_accounting(event: "dp_accounting.DpEvent") -> DpEvent:
    """The dpaudit event describing the same mechanism as the dp_accounting ``event`` (see the module table)."""
    d = dp_accounting
    if isinstance(event, d.GaussianDpEvent):
        return SubsampledGaussian(sampling_rate=1.0, noise_multiplier=event.noise_multiplier, steps=1)
    if isinstance(event, d.PoissonSampledDpEvent):
        inner = event.event
        if not isinstance(inner, d.GaussianDpEvent):
            raise _no_counterpart(f"PoissonSampledDpEvent of {type(inner).__name__}",
                                  "dpaudit's Poisson-sampled event is the sampled Gaussian only.")
        return SubsampledGaussian(sampling_rate=event.sampling_probability, noise_multiplier=inner.noise_multiplier,
                                  steps=1)
    if isinstance(event, d.SampledWithoutReplacementDpEvent):
        inner = event.event
        if not isinstance(inner, d.GaussianDpEvent):
            raise _no_counterpart(f"SampledWithoutReplacementDpEvent of {type(inner).__name__}",
                                  "dpaudit's without-replacement event is the Gaussian only.")
        return FixedBatchGaussian(int(event.source_dataset_size), int(event.sample_size), 2.0 * inner.noise_multiplier,
                                  1, neighbouring="substitution")
    if isinstance(event, d.RandomizedResponseDpEvent):
        p = event.noise_parameter
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < p < 1.0:
            raise ParameterError("The 'noise_parameter' of RandomizedResponseDpEvent must lie in (0, 1) for a dpaudit "
                                 f"RandomizedResponse (keep probability 1 - p in (0, 1)). Got {p!r:.80} instead.")
        return RandomizedResponse(num_classes=event.num_buckets, num_samples=1, keep_probability=1.0 - float(p))
    if isinstance(event, d.SelfComposedDpEvent):
        # a whole number of compositions: 1.9 or "5" is refused, never truncated (truncating under-accounts)
        count = check_int(event.count, "count", "SelfComposedDpEvent", low=0, high=MAX_COMPOSITIONS)
        inner = from_dp_accounting(event.event)
        leaf = isinstance(event.event, (d.GaussianDpEvent, d.PoissonSampledDpEvent, d.RandomizedResponseDpEvent,
                                        d.SampledWithoutReplacementDpEvent))
        if leaf and count >= 1 and isinstance(inner, FixedBatchGaussian):
            return FixedBatchGaussian(inner.dataset_size, inner.batch_size, inner.noise_multiplier, count,
                                      neighbouring="substitution")
        if leaf and count >= 1 and isinstance(inner, SubsampledGaussian):
            return SubsampledGaussian(inner.sampling_rate, inner.noise_multiplier, steps=count)
        if leaf and count >= 1 and isinstance(inner, RandomizedResponse):
            return RandomizedResponse(num_classes=inner.num_classes, num_samples=count,
                                      keep_probability=inner.keep_probability)
        return Repeated(inner, count)
    if isinstance(event, d.ComposedDpEvent):
        if not isinstance(event.events, (list, tuple)):
            raise ParameterError(f"The 'events' parameter of ComposedDpEvent must be a list of dp_accounting events. "
                                 f"Got {event.events!r:.80} instead.")
        return Composed(tuple(from_dp_accounting(e) for e in event.events))
    if isinstance(event, d.NoOpDpEvent):
        return Composed(())
    if not isinstance(event, d.DpEvent):
        raise ParameterError(f"A dp_accounting event was expected (a DpEvent object; in JSON an object with a 'type'). "
                             f"Got {event!r:.80} instead.")
    why = {
        "LaplaceDpEvent": "dpaudit accounts Laplace noise only inside report-noisy-max (LaplaceNoisyMax).",
        "SampledWithReplacementDpEvent": "dpaudit's sampled Gaussian assumes Poisson sampling.",
        "NonPrivateDpEvent": "the mechanism is not differentially private (epsilon is infinite).",
        "UnsupportedDpEvent": "dp_accounting itself marks the mechanism as unsupported.",
    }.get(type(event).__name__, "dpaudit has no event for it.")
    raise _no_counterpart(f"The dp_accounting event {type(event).__name__}", why)


def ledger_from_dp_accounting(events: "dp_accounting.DpEvent | Mapping[str, dp_accounting.DpEvent]", *, delta: float,
                              accountant: str = "rdp") -> PrivacyLedger:
    """A :class:`PrivacyLedger` from dp_accounting events: one event (party ``"all"``) or ``{party: event}``."""
    per_party = dict(events) if isinstance(events, Mapping) else {"all": events}
    converted = {party: from_dp_accounting(ev) for party, ev in per_party.items()}  # validate all before building
    for party, ev in converted.items():
        total = sum(mult * int(getattr(leaf, "steps", 1) or 1) * int(getattr(leaf, "num_samples", 1) or 1)
                    for leaf, mult in flatten(ev))
        if total > MAX_COMPOSITIONS:
            raise ParameterError(f"The dp_accounting events of party {party!r} compose {format_value(total)} mechanism applications "
                                 f"(nested counts multiplied); dpaudit accounts at most {MAX_COMPOSITIONS:.0e}.")
    ledger = PrivacyLedger(delta=delta, accountant=accountant)
    for party, ev in converted.items():
        ledger.record(party, ev)
    return ledger


def dp_event_to_json(event: "dp_accounting.DpEvent") -> dict[str, Any]:
    """A JSON-ready dict of a dp_accounting event: ``{"type": "<class name>", <attrs field>: value, ...}``, nested."""
    import attr

    if not isinstance(event, dp_accounting.DpEvent):
        raise ParameterError(f"The 'event' parameter of dp_event_to_json must be a dp_accounting DpEvent. Got {type(event).__name__} instead.")
    out: dict[str, Any] = {"type": type(event).__name__}
    for f in attr.fields(type(event)):
        v = getattr(event, f.name)
        if isinstance(v, dp_accounting.DpEvent):
            v = dp_event_to_json(v)
        elif isinstance(v, (list, tuple)):
            v = [dp_event_to_json(x) if isinstance(x, dp_accounting.DpEvent) else x for x in v]
        out[f.name] = v
    return out


def dp_event_from_json(data: Any, *, where: str = "dp_event") -> "dp_accounting.DpEvent":
    """Rebuild a dp_accounting event from :func:`dp_event_to_json` output. Only dp_accounting's own ``*DpEvent``
    classes are constructed, with their declared fields (nothing else is looked up or called)."""
    import attr

    if not isinstance(data, Mapping) or not isinstance(data.get("type"), str):
        raise ParameterError(f"{where} must be a JSON object with a 'type' naming a dp_accounting event. Got {data!r:.80} instead.")
    name = data["type"]
    cls = getattr(dp_accounting, name, None) if name.endswith("DpEvent") else None
    if not (isinstance(cls, type) and issubclass(cls, dp_accounting.DpEvent)):
        raise ParameterError(f"{where}: {name!r} is not a dp_accounting event type.")
    names = {f.name for f in attr.fields(cls)}
    unknown = sorted(set(data) - names - {"type"})
    if unknown:
        raise ParameterError(f"{where}: {name} has no field(s) {unknown}; its fields are {sorted(names)}.")
    kwargs = {}
    for k in names & set(data):
        v = data[k]
        if k == "event":            # a nested event (SelfComposed, PoissonSampled, ...)
            if not isinstance(v, Mapping):
                raise ParameterError(f"{where}.{k} must be a JSON object describing a dp_accounting event. Got {v!r:.80} instead.")
            v = dp_event_from_json(v, where=f"{where}.{k}")
        elif k == "events":         # ComposedDpEvent's list of events
            if not isinstance(v, list) or not all(isinstance(x, Mapping) for x in v):
                raise ParameterError(f"{where}.{k} must be a list of JSON objects describing dp_accounting events. "
                                     f"Got {v!r:.80} instead.")
            v = [dp_event_from_json(x, where=f"{where}.{k}[{i}]") for i, x in enumerate(v)]
        elif isinstance(v, (Mapping, list)) or (isinstance(v, float) and not math.isfinite(v)):
            raise ParameterError(f"{where}.{k} must be a finite number, a string or a boolean. Got {v!r:.80} instead.")
        kwargs[k] = v
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ParameterError(f"{where}: cannot build {name} ({exc}).") from None

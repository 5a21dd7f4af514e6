"""Client-level accounting of a recorded Flower run, under the sampler that ran (no Flower import needed).

Each round of a Flower DP wrapper (``flwr.serverapp.strategy.DifferentialPrivacy*Clipping``) averages the clipped
updates of the m sampled clients with equal weights and adds :math:`N(0, (\\sigma C / m)^2)` to the average: up to the
factor m, the Gaussian mechanism on the sum of m updates of norm at most C. Flower's ``sample_nodes`` draws the m
clients uniformly without replacement from the N connected nodes. So one round is
:class:`~dpaudit.accountants.events.FixedBatchGaussian` with ``dataset_size=N``, ``batch_size=m``, clients for
records, under

* ``replace-one`` (``"substitution"``: one client's data replaced; its update moves the sum by up to 2C) --
  Wang, Balle, Kasiviswanathan, AISTATS 2019, Theorem 9 with the Gaussian of sensitivity 2C;
* ``add-remove`` -- the coupling of the event's docstring: the Poisson-subsampled Gaussian at rate m/N with noise
  multiplier sigma/2 (a fixed sample size doubles the sensitivity).

Figures per client (the ``per_client`` rows):

* ``sampled``: the run's figure with amplification by sampling, the same for every client (valid while which
  clients took part stays secret, as every amplified figure assumes); only when the record shows Flower's uniform
  sampler ran with a constant sample size, equal client weights and every sampled client aggregated;
* ``participation``: the client's own released rounds k, without amplification: k Gaussian mechanisms of sensitivity
  2C (valid even when participation is public, e.g. this record is released);
* ``headline``: the smaller of the two. The sampled figure is ex ante (over the sampler's coins); the participation
  figure is ex post, for the sampling this run drew (the sampler is independent of the data, so conditioning on its
  draw leaves a DP mechanism on the client's own rounds). The run's ``epsilon`` is the largest client headline; the
  ex-ante interval is [``lower_bound``, ``sampled_epsilon``].
* ``local``: ``LocalDpMod``'s noise on each of the client's k replies, composed (RDP) over the k rounds -- the
  guarantee against the server itself. The mod's own claim (epsilon, delta) per round uses the classic calibration
  with the ``sensitivity`` the user gave; dpaudit takes the noise it adds and the sensitivity 2C of a clipped update.

For adaptive clipping the clipped-count release is accounted with the model update: with sensitivities 2C (model
sum) and 1 (clipped count), the pair is one Gaussian of sensitivity 2C and noise multiplier
:math:`(\\sigma_\\Delta^{-2} + (2\\sigma_b)^{-2})^{-1/2}` (Andrew et al., NeurIPS 2021, Theorem 1).

Beside the upper bounds, a certified *lower* bound (:func:`sampled_lower_bound`) from an explicit pair, and
Flower's own accountant's figures (``flwr.supercore.privacy_accounting.RdpAccountant`` in 1.42: the run's, when it
used one, and Flower's two conventions re-computed) with a red flag wherever one lies below the certified lower
bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from dpaudit.accountants.pld import gaussian_pld

from dpaudit.accountants.pairs import dpsgd_lower_bound
from dpaudit.accountants._common import FFT_DELTA_ALLOWANCE
from dpaudit.accountants.events import FixedBatchGaussian, SubsampledGaussian
from dpaudit.accountants.ledger import PrivacyLedger
from dpaudit.accountants.rdp import RdpAccountant
from dpaudit.errors import ParameterError, check_choice, check_float, check_probability
from dpaudit.integrations.flower.record import FlowerRun

__all__ = ["account_run", "FlowerAccounting", "ClientFigure", "FlowerFigure", "sampled_lower_bound", "NEIGHBOURING",
           "flower_convention_epsilon"]

#: dpaudit's spelling -> FixedBatchGaussian's neighbouring relation
NEIGHBOURING = {"replace-one": "substitution", "add-remove": "add-remove"}


@dataclass(frozen=True, slots=True)
class ClientFigure:
    """One client's figures at the run's delta (``inf``: no guarantee)."""

    node_id: int
    partition: int | None
    rounds: int
    sampled: float
    participation: float
    headline: float
    local: float | None = None


@dataclass(frozen=True, slots=True)
class FlowerFigure:
    """A figure of Flower's own accountant (``source``: ``"run"`` recorded from the run, ``"flwr"`` re-computed with
    Flower's installed accountant, ``"reproduced"`` Flower's convention re-computed with dp_accounting when flwr is
    not installed), its convention, and whether it lies below dpaudit's certified lower bound."""

    convention: str
    epsilon: float
    delta: float
    source: str
    below_lower_bound: bool


@dataclass(frozen=True, slots=True)
class FlowerAccounting:
    """dpaudit's accounting of a Flower run (see the module docstring): ``epsilon`` the largest per-client headline,
    ``sampled_epsilon`` the ex-ante amplified figure (``inf`` when the sampling is not verified), ``lower_bound`` the
    certified lower bound on any ex-ante analysis of the rounds' mechanism (None without DP)."""

    delta: float
    neighbouring: str
    kind: str
    sampler_verified: bool
    population: int
    sample_size: int | None
    released_rounds: int
    epsilon: float
    sampled_epsilon: float
    lower_bound: float | None
    per_client: tuple[ClientFigure, ...]
    flower: tuple[FlowerFigure, ...]
    flags: tuple[tuple[str, str], ...]
    assumptions: tuple[str, ...]
    ledger: Mapping[str, Any] | None = None
    local_epsilon: float | None = None
    facts: Mapping[str, Any] = field(default_factory=dict)

    def privacy_ledger(self) -> PrivacyLedger | None:
        return None if self.ledger is None else PrivacyLedger.from_dict(self.ledger)


def sampled_lower_bound(rounds: Mapping[tuple[int, int, float], int], delta: float, *,
                        value_discretization_interval: float = 1e-3) -> float:
    """A certified lower bound on the client-level epsilon at ``delta`` of rounds of fixed-size sampling (``rounds``:
    (population N, sample size m, noise multiplier sigma) -> count), under both replace-one and add/remove.

    The pair (module docstring of :mod:`dpaudit.accountants.sampling` for the method): a one-dimensional model whose
    clipped update is +C for the target client and -C for every other client (and for the target's replacement).
    In each round the target is sampled with probability q = m/N; the noisy sum is then shifted by 2C against its
    value without the target, so one round is the pair :math:`((1-q) N(0, \\sigma^2) + q N(2, \\sigma^2), N(0,
    \\sigma^2))` in units of C: the Poisson-subsampled Gaussian at rate q with noise multiplier sigma/2, independent
    over rounds. Its privacy-loss distribution (dp_accounting, *optimistic* rounding, both directions) composed over
    the rounds, at ``delta + 1e-12`` (FFT round-off), is attained by a valid pair of neighbouring populations, so no
    correct analysis can give less. With one setting for every round, the larger of this and the accountants' own
    fixed-size pairs (:func:`dpaudit.accountants.pairs.dpsgd_lower_bound`, the smaller of its add/remove and
    substitution figures, so that it holds under both).
    """
    delta = check_probability(delta, "delta", "sampled_lower_bound")
    vdi = check_float(value_discretization_interval, "value_discretization_interval", "sampled_lower_bound", low=1e-6, high=1.0)
    total = None
    for (n, m, sigma), count in rounds.items():
        if sigma <= 0:
            return math.inf
        # ADD_OR_REMOVE_ONE: dp_accounting builds both directions (remove and add) and takes the larger epsilon
        one = gaussian_pld(sigma / 2.0, sensitivity=1.0, sampling_prob=min(1.0, m / n), pessimistic_estimate=False,
                           value_discretization_interval=vdi, use_connect_dots=False)
        one = one.self_compose(count)
        total = one if total is None else total.compose(one)
    best = 0.0 if total is None else float(total.get_epsilon_for_delta(min(delta + FFT_DELTA_ALLOWANCE, 1.0)))
    if len(rounds) == 1:
        # one setting throughout: also the accountants' explicit fixed-size pairs (issue 33), which hold the target's
        # displacement of another client; the smaller of the two relations', so the figure holds under both
        (n, m, sigma), count = next(iter(rounds.items()))
        if 1 <= m <= n and count >= 1:
            pairs = min(dpsgd_lower_bound(dataset_size=int(n), batch_size=int(m), noise_multiplier=float(sigma),
                                          steps=int(count), delta=delta, sampling="fixed-wor",
                                          neighbouring=relation).epsilon
                        for relation in ("add-remove", "substitution"))
            best = max(best, float(pairs))
    return max(best, 0.0)


def flower_convention_epsilon(convention: str, population: int, sample_size: int, noise_multiplier: float,
                              releases: int, delta: float) -> tuple[float, str]:
    """Flower 1.42's client-level RDP figure for ``releases`` rounds under ``convention`` (``"no-amplification"``:
    ``GaussianDpEvent(sigma)`` under add/remove; ``"without-replacement"``: ``SampledWithoutReplacementDpEvent(N, m,
    GaussianDpEvent(sigma))`` under replace-one), with Flower's own accountant when flwr is installed (source
    ``"flwr"``), else the same dp_accounting calls Flower's ``RdpAccountant`` makes (``"reproduced"``)."""
    try:
        from flwr.supercore.privacy_accounting import (GaussianPrivacyEvent, NeighboringRelation, PrivacyConfig,
                                                       SamplingMethod)
        from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant as FlwrRdp
    except ImportError:
        from dp_accounting import dp_event, privacy_accountant
        from dp_accounting.rdp import rdp_privacy_accountant as rdp

        g = dp_event.GaussianDpEvent(noise_multiplier)
        if convention == "no-amplification":
            acc = rdp.RdpAccountant(neighboring_relation=privacy_accountant.NeighboringRelation.ADD_OR_REMOVE_ONE)
            acc.compose(g, releases)
        else:
            acc = rdp.RdpAccountant(neighboring_relation=privacy_accountant.NeighboringRelation.REPLACE_ONE)
            acc.compose(dp_event.SampledWithoutReplacementDpEvent(population, sample_size, g), releases)
        return float(acc.get_epsilon(delta)), "reproduced"
    relation = NeighboringRelation.ADD_OR_REMOVE_ONE if convention == "no-amplification" else NeighboringRelation.REPLACE_ONE
    cfg = PrivacyConfig(target_delta=delta, population_size=population, neighboring_relation=relation,
                        sampling_method=SamplingMethod(convention))
    acc = FlwrRdp(cfg)
    acc.compose(GaussianPrivacyEvent(noise_multiplier=noise_multiplier, sample_size=sample_size, population_size=population),
                releases)
    return float(acc.get_epsilon(delta)), "flwr"


def _epsilon(events: list[tuple[Any, int]], delta: float) -> float:
    if not events:
        return 0.0
    acc = RdpAccountant()
    for ev, c in events:
        acc.compose(ev, c)
    return float(acc.epsilon_quiet(delta))


def account_run(run: FlowerRun, *, delta: float, neighbouring: str = "replace-one") -> FlowerAccounting:
    """dpaudit's client-level accounting of ``run`` at ``delta`` (module docstring)."""
    owner = "account_run"
    if not isinstance(run, FlowerRun):
        raise ParameterError(f"The 'run' parameter of {owner} must be a FlowerRun. Got {type(run).__name__} instead.")
    delta = check_probability(delta, "delta", owner)
    neighbouring = check_choice(neighbouring, "neighbouring", owner, tuple(NEIGHBOURING))
    st = run.strategy
    released = [r for r in run.rounds if r.released]
    flags: list[tuple[str, str]] = []
    assumptions = [f"Client-level DP: the neighbouring populations differ in one client's data ({neighbouring}).",
                   "Every released round's global model is observed (the figures cover all intermediate models)."]
    parts = run.participation()
    clients = run.clients
    pops = {len(r.population) for r in released}
    sizes = {len(r.sampled) for r in released}
    population = max((len(r.population) for r in run.rounds), default=0)
    dp = st.kind not in ("none", "unknown")
    if not dp:
        flags.append(("no_dp", f"The run's strategy ({st.kind}: {', '.join(st.classes)[:200]}) adds no DP noise dpaudit "
                               "knows: no guarantee (epsilon infinite)."))
    noise_ok = dp and all(r.noise_multiplier is not None and r.noise_multiplier > 0 for r in released)
    if dp and not noise_ok:
        flags.append(("zero_noise", "A released round added no noise: no guarantee."))
    if noise_ok and st.kind.endswith("adaptive") and not st.clipped_count_stddev:
        # the clipping norm follows the clipped-count: released without noise, it reveals clients' bits
        flags.append(("zero_noise", "Adaptive clipping with no noise on the clipped count: no guarantee."))
        noise_ok = False
    unverified = []
    if run.sampler != "uniform-without-replacement":
        unverified.append("the sampler is not Flower's own uniform sample_nodes")
    if dp and st.num_sampled_clients is not None and sizes - {st.num_sampled_clients}:
        unverified.append(f"sample sizes {sorted(sizes)} differ from num_sampled_clients={st.num_sampled_clients}")
    if any(set(r.replied) != set(r.sampled) for r in released):
        unverified.append("a sampled client's reply was missing from an aggregate")
    if dp and any(not r.weights or len(set(r.weights)) > 1 for r in released):
        # FedAvg weights the average by the clients' reported weights: unequal ones scale a client's influence
        # past C/m, which the noise does not cover (Flower's own accountant refuses them too)
        flags.append(("unequal_weights", "A released round aggregated clients with unequal (or unreported) weights: a "
                                         "client's influence on the average is not bounded by C/m; no guarantee."))
        noise_ok = False
    sampler_verified = not unverified and bool(released)
    if unverified:
        flags.append(("sampling_unverified", "Amplification by sampling is not claimed: " + "; ".join(unverified) + "."))
    sigma_eff = st.noise_multiplier if st.kind.endswith("adaptive") else None

    def sigma_of(r) -> float:
        # the effective multiplier of the round (adaptive: the model noise and the clipped count together)
        if st.kind.endswith("adaptive"):
            return (r.noise_multiplier ** -2 + (2 * st.clipped_count_stddev) ** -2) ** -0.5
        return float(r.noise_multiplier)

    rel = NEIGHBOURING[neighbouring]
    groups: dict[tuple[int, int, float], int] = {}
    sampled_eps, lower = math.inf, None
    ledger = None
    if dp and noise_ok:
        for r in released:
            key = (len(r.population), len(r.sampled), sigma_of(r))
            groups[key] = groups.get(key, 0) + 1
        if sampler_verified:
            events = [(FixedBatchGaussian(n, m, s, steps=c, neighbouring=rel), 1) for (n, m, s), c in groups.items()]
            sampled_eps = _epsilon(events, delta)
            assumptions.append(f"Sampling: Flower's sample_nodes drew exactly m of the N connected clients uniformly "
                               f"without replacement each round (N in {sorted(pops)}, m in {sorted(sizes)}), independently of the "
                               "data; amplification holds while participation stays secret.")
            # the pair assumes the sampler that ran: with another sampler (one that never picks the target, say) it
            # is no lower bound, so none is given then
            lg = {(len(r.population), len(r.sampled), float(r.noise_multiplier)): 0 for r in released}
            for r in released:
                lg[(len(r.population), len(r.sampled), float(r.noise_multiplier))] += 1
            lower = sampled_lower_bound(lg, delta)
    # per client
    per_client = []
    led = PrivacyLedger(delta=delta) if dp and noise_ok else None
    local = run.local_dp
    local_eps_all = []
    for node in clients:
        k = parts.get(node, 0)
        mine = [r for r in released if node in r.replied]
        if not dp or not noise_ok:
            part_eps = math.inf if k else 0.0
            pe: list = []
        else:
            by_sigma: dict[float, int] = {}
            for r in mine:
                by_sigma[sigma_of(r)] = by_sigma.get(sigma_of(r), 0) + 1
            pe = [(SubsampledGaussian(1.0, s / 2.0, c), 1) for s, c in by_sigma.items()]
            part_eps = _epsilon(pe, delta)
        samp = sampled_eps if dp and noise_ok else math.inf
        head = min(samp, part_eps)
        loc = None
        if local is not None:
            if local.noise_std > 0 and local.clipping_norm > 0:
                # each reply: Gaussian of sensitivity 2C (any clipped update for any other), std noise_std
                loc = _epsilon([(SubsampledGaussian(1.0, local.noise_std / (2.0 * local.clipping_norm), k), 1)], delta) if k else 0.0
            else:
                loc = math.inf if k else 0.0
            local_eps_all.append(loc)
        pid = run.partitions.get(str(node))
        per_client.append(ClientFigure(node, pid, k, samp, part_eps, head, loc))
        if led is not None:
            party = f"node {node}" if pid is None else f"partition {pid}"
            if samp <= part_eps and sampler_verified:
                for ev, c in events:
                    led.record(party, ev, c)
            elif pe:
                for ev, c in pe:
                    led.record(party, ev, c)
    if led is not None:
        led.add_assumption(assumptions[0])
        led.add_assumption("Per client: the smaller of the amplified run figure and the client's own rounds without "
                           "amplification (sensitivity 2C each).")
        ledger = led.to_dict()
    overall = max((c.headline for c in per_client), default=math.inf if not dp else 0.0)
    if lower is not None and math.isfinite(sampled_eps) and sampled_eps < lower - 1e-9:
        raise ArithmeticError(f"internal error: upper bound {sampled_eps} below the certified lower bound {lower}")
    # Flower's figures
    flower: list[FlowerFigure] = []
    m = st.num_sampled_clients
    if dp and noise_ok and released and m and sigma_eff is None and st.noise_multiplier:
        n = population
        for conv in ("no-amplification", "without-replacement"):
            try:
                eps_f, src = flower_convention_epsilon(conv, n, m, float(st.noise_multiplier), len(released), delta)
            except (ValueError, ImportError, ArithmeticError):
                continue
            flower.append(FlowerFigure(conv, eps_f, delta, src, lower is not None and eps_f < lower))
    if run.flower_accountant is not None:
        fe = run.flower_accountant.get("epsilon")
        fd = run.flower_accountant.get("delta")
        if isinstance(fe, (int, float)) and isinstance(fd, (int, float)) and 0 < fd < 1:
            flower.append(FlowerFigure("run", float(fe), float(fd), "run",
                                       lower is not None and math.isclose(fd, delta) and float(fe) < lower))
    for f in flower:
        if f.below_lower_bound:
            flags.append(("flower_below_lower_bound",
                          f"Flower's {f.convention} figure epsilon {f.epsilon:.4g} lies below dpaudit's certified lower "
                          f"bound {lower:.4g} at delta {delta:g}: it understates the privacy loss."))
    local_max = max(local_eps_all) if local_eps_all else None
    if local is not None and local.sensitivity < 2 * local.clipping_norm:
        flags.append(("local_dp_sensitivity", f"LocalDpMod was given sensitivity {local.sensitivity:g} but a clipped "
                                              f"update can move by 2C = {2 * local.clipping_norm:g}: its own (epsilon, delta) "
                                              "per round is understated; dpaudit accounts the noise it added at sensitivity 2C."))
    facts = {"rounds": len(run.rounds), "clients": len(clients),
             "participation": {"min": min(parts.values(), default=0), "max": max(parts.values(), default=0)},
             "groups": [{"population": n, "sample_size": m_, "noise_multiplier": s, "rounds": c} for (n, m_, s), c in groups.items()]}
    return FlowerAccounting(delta, neighbouring, st.kind, sampler_verified, population,
                            next(iter(sizes)) if len(sizes) == 1 else None, len(released), overall, sampled_eps, lower,
                            tuple(per_client), tuple(flower), tuple(flags), tuple(assumptions), ledger, local_max, facts)

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

Two routes give the amplified figure, the smaller one is used (``facts["sampled_routes"]``): RDP of that event, and
a privacy-loss distribution of the same rounds (:func:`sampled_pld_epsilon`, through
:func:`dpaudit.accountants.sampling.fixed_size_gaussian_pld`: Dong, Roth and Su's subsampling operator for m of N
without replacement in f-DP under replace-one), typically far tighter (the headline run: 10.33 against RDP's 18.90,
with the certified lower bound at 9.77).

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

The per-client ledger (``ledger``, ``ledger.json`` of a run, read by claims naming a client with ``party``) holds,
per client, the events of its headline and reads the same figure: a PLD ledger (``PrivacyLedger(accountant="pld")``:
a client's own rounds by their exact Gaussian-DP composition, the amplified rounds by
:func:`~dpaudit.accountants.sampling.fixed_size_gaussian_pld` at the ledger's grid, whose figure the amplified route
then takes when smaller); an RDP ledger, at or above the figures, only where RDP gave the smaller amplified figure or
the PLD ledger cannot hold it (past :data:`MAX_PLD_LEDGER_PARTIES` amplified clients, multipliers below
``PLD_LEDGER_SIGMA_FLOOR``, a loss range past its grid).

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

import numpy as np

from dpaudit.accountants.pld import gaussian_pld

from dpaudit.accountants.pairs import dpsgd_lower_bound
from dpaudit.accountants._common import FFT_DELTA_ALLOWANCE
from dpaudit.accountants.events import FixedBatchGaussian, SubsampledGaussian
from dpaudit.accountants.ledger import PrivacyLedger
from dpaudit.accountants.closed_form import gaussian_mechanism_epsilon
from dpaudit.accountants.rdp import RdpAccountant
from dpaudit.accountants.sampling import fixed_size_gaussian_pld
from dpaudit.errors import DPAuditError, ParameterError, check_choice, check_float, check_probability
from dpaudit.integrations.flower.record import DpSettings, FlowerRun, RoundRecord

__all__ = ["account_run", "FlowerAccounting", "ClientFigure", "FlowerFigure", "sampled_lower_bound", "NEIGHBOURING",
           "flower_convention_epsilon", "merge_settings", "combined_multiplier", "gaussian_rounds_epsilon",
           "MAX_SETTINGS", "MAX_PLD_LEDGER_PARTIES", "LOWER_BOUND_SIGMA_FLOOR", "FLOWER_SIGMA_RANGE", "MAX_LEDGER_PARTIES", "sampled_pld_epsilon", "PLD_SIGMA_RANGE"]

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


#: At most this many distinct (N, m, sigma) settings are accounted one by one; a run with more (a noise multiplier
#: per round) is accounted in this many groups of neighbouring settings, each at its least private member for the
#: upper bounds (smallest N and sigma, largest m) and its most private for the lower bound: valid both ways, and the
#: cost is bounded whatever the record holds
MAX_SETTINGS = 8
#: A ledger (one party per participating client, each an RDP conversion of ~0.3 ms) is written for at most this many
MAX_LEDGER_PARTIES = 10_000
#: A PLD ledger with amplified parties (reading it back rebuilds each one's fixed-size sampling PLD at the ledger's
#: grid, ~0.15-0.2 s a party, whenever a claim reads it) is written for at most this many participating clients and
#: multipliers from PLD_LEDGER_SIGMA_FLOOR up (the grid grows as 1 / sigma^2); beyond, the ledger is RDP's (valid,
#: at or above the figures) and its assumptions say so
MAX_PLD_LEDGER_PARTIES = 64
PLD_LEDGER_SIGMA_FLOOR = 0.3
#: The lower bound's pair is evaluated at sigma no smaller than this (more noise: a smaller epsilon, still a lower
#: bound), and its loss grid coarsens with 1/sigma so that its privacy-loss distribution holds at most ~20,000 points
#: per round (sigma 0.01 asked for tens of millions at the fixed grid, minutes and GiBs)
LOWER_BOUND_SIGMA_FLOOR = 0.05
LOWER_BOUND_SIGMA_CEILING = 1e6
_LB_POINTS = 20_000


def merge_settings(groups: Mapping[tuple[int, int, float], int], *, upper: bool,
                   limit: int = MAX_SETTINGS) -> dict[tuple[int, int, float], int]:
    """``groups`` ((N, m, sigma) -> rounds) with at most ``limit`` settings: unchanged when it has that few, else the
    settings sorted by sigma and cut into ``limit`` runs, each accounted at one setting that dominates it (``upper``:
    the least private -- smallest N, largest m, smallest sigma -- so an upper bound stays valid; else the most private,
    so a lower bound does)."""
    if len(groups) <= limit:
        return dict(groups)
    keys = sorted(groups, key=lambda k: (k[2], k[1] / k[0]))
    out: dict[tuple[int, int, float], int] = {}
    for chunk in (keys[i * len(keys) // limit:(i + 1) * len(keys) // limit] for i in range(limit)):
        if not chunk:
            continue
        if upper:
            n = min(k[0] for k in chunk)
            key = (n, min(n, max(k[1] for k in chunk)), min(k[2] for k in chunk))
        else:
            key = (max(k[0] for k in chunk), min(k[1] for k in chunk), max(k[2] for k in chunk))
        out[key] = out.get(key, 0) + sum(groups[k] for k in chunk)
    return out


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

    Bounded work: at most :data:`MAX_SETTINGS` settings (:func:`merge_settings`, each at its most private member),
    sigma at least :data:`LOWER_BOUND_SIGMA_FLOOR` and a loss grid no finer than ~20,000 points per round -- every
    one of them makes the pair more private or its rounding coarser, so the figure stays a lower bound.
    """
    delta = check_probability(delta, "delta", "sampled_lower_bound")
    vdi = check_float(value_discretization_interval, "value_discretization_interval", "sampled_lower_bound", low=1e-6, high=1.0)
    rounds = merge_settings({k: c for k, c in rounds.items() if c > 0}, upper=False)
    if any(not sigma > 0 for (_, _, sigma) in rounds):
        return math.inf
    # rounds of more noise than LOWER_BOUND_SIGMA_CEILING are left out of the pair (dropping rounds is a
    # post-processing: still a lower bound; their loss is below the grid anyway)
    rounds = {(n, m, max(float(sigma), LOWER_BOUND_SIGMA_FLOOR)): c for (n, m, sigma), c in rounds.items()
              if sigma <= LOWER_BOUND_SIGMA_CEILING}
    total = None
    # the loss of one round spans about 0.5/half^2 (the shift) + 10/half (the tails) nats; one grid for every setting
    # (distributions compose on one grid), sized by the smallest multiplier
    half = min((sigma for (_, _, sigma) in rounds), default=1.0) / 2.0
    grid = max(vdi, (0.5 / half ** 2 + 10.0 / half) / _LB_POINTS)
    for (n, m, sigma), count in rounds.items():
        half = sigma / 2.0
        # ADD_OR_REMOVE_ONE: dp_accounting builds both directions (remove and add) and takes the larger epsilon
        one = gaussian_pld(half, sensitivity=1.0, sampling_prob=min(1.0, m / n), pessimistic_estimate=False,
                           value_discretization_interval=grid, use_connect_dots=False)
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
    try:
        return float(acc.epsilon_quiet(delta))
    except (ArithmeticError, FloatingPointError):       # past the float range (a multiplier like 1e-300): no bound
        return math.inf


def combined_multiplier(a: float, b: float) -> float:
    """:math:`(a^{-2} + b^{-2})^{-1/2}` without overflow (a multiplier of 1e-200 squared is below the float range):
    the multiplier of two Gaussian releases of one sensitivity accounted as one."""
    lo, hi = (a, b) if a <= b else (b, a)
    if lo <= 0.0:
        return 0.0
    return lo / math.hypot(1.0, lo / hi)


def gaussian_rounds_epsilon(mu: float, delta: float) -> float:
    """The exact epsilon at ``delta`` of Gaussian mechanisms whose mu = sensitivity / noise compose to ``mu``
    (mu-GDP: Dong, Roth and Su 2019, Corollary 3.3; exact conversion: Balle and Wang 2018, Theorem 8), rounded up;
    ``inf`` for mu infinite or an epsilon past 1e300, 0 for mu 0."""
    if mu <= 0.0:
        return 0.0
    if not math.isfinite(mu):
        return math.inf
    return gaussian_mechanism_epsilon(mu, delta)


def _round_sigma(r: RoundRecord, st: DpSettings) -> float:
    """The effective noise multiplier of a released round, relative to the sum of the replies it aggregated.

    Flower's wrappers add N(0, (sigma C / m)^2) to the *average* of the r replies, with m the wrapper's
    ``num_sampled_clients`` whatever r is: relative to the sum, sigma r / m, smaller than sigma when fewer than m
    replies were aggregated (FedAvg told to sample fewer, a reply lost). Adaptive clipping adds the clipped count's
    noise (sigma_b on a count of sensitivity 1; Andrew et al. 2021, Theorem 1)."""
    sigma = float(r.noise_multiplier or 0.0)
    declared = _declared(r, st)
    replies = len(r.replied)
    if declared and replies < declared:
        sigma = sigma * (replies / declared)
    if st.kind.endswith("adaptive"):
        sigma = combined_multiplier(sigma, 2.0 * float(st.clipped_count_stddev or 0.0))
    return sigma


def _declared(r: RoundRecord, st: DpSettings) -> int | None:
    """The wrapper's ``num_sampled_clients`` m when round ``r`` ran (older records: the strategy's)."""
    return r.declared_sample_size or st.num_sampled_clients


def _fewer_replies(released: list[RoundRecord], st: DpSettings) -> list[RoundRecord]:
    """The rounds that aggregated fewer replies than :func:`_declared` (their noise is accounted smaller)."""
    return [r for r in released if (d := _declared(r, st)) and len(r.replied) < d]


def account_run(run: FlowerRun, *, delta: float, neighbouring: str = "replace-one") -> FlowerAccounting:
    """dpaudit's client-level accounting of ``run`` at ``delta`` (module docstring).

    Every round is accounted at the noise really added (:func:`_round_sigma`: sigma r / m when r < m replies were
    aggregated, flag ``replies_below_declared``). The work is bounded by the record's size: at most
    :data:`MAX_SETTINGS` settings for the amplified figures, one pass over the rounds for the per-client ones (each
    client's rounds compose exactly into one Gaussian, one conversion per distinct result).
    """
    owner = "account_run"
    if not isinstance(run, FlowerRun):
        raise ParameterError(f"The 'run' parameter of {owner} must be a FlowerRun. Got {type(run).__name__} instead.")
    delta = check_probability(delta, "delta", owner)
    neighbouring = check_choice({"substitution": "replace-one"}.get(neighbouring, neighbouring)
                                if isinstance(neighbouring, str) else neighbouring, "neighbouring", owner,
                                tuple(NEIGHBOURING))  # substitution: the accountants' name of replace-one
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
    fewer = _fewer_replies(released, st) if dp else []
    sig = {r.round: _round_sigma(r, st) for r in released} if dp and noise_ok else {}
    if fewer and noise_ok:
        low = min(sig[r.round] for r in fewer)
        flags.append(("replies_below_declared",
                      f"{len(fewer)} released round(s) aggregated fewer replies than the wrapper's num_sampled_clients "
                      f"(e.g. round {fewer[0].round}: {len(fewer[0].replied)} of "
                      f"{_declared(fewer[0], st)}): Flower's noise sigma C/m on their "
                      f"average is sigma x replies / m relative to their sum; those rounds are accounted at that "
                      f"smaller multiplier (lowest {low:.4g}), not at the declared one."))
        assumptions.append("Each round is accounted at the noise really added: sigma x replies / num_sampled_clients "
                           "where fewer replies than declared were aggregated.")

    rel = NEIGHBOURING[neighbouring]
    groups: dict[tuple[int, int, float], int] = {}
    sampled_eps, lower = math.inf, None
    routes: dict[str, float] = {}
    sampled_route = None
    events: list[tuple[Any, int]] = []
    up: dict[tuple[int, int, float], int] = {}
    if dp and noise_ok:
        for r in released:
            if r.replied:
                key = (len(r.population), len(r.sampled), sig[r.round])
                groups[key] = groups.get(key, 0) + 1
        if sampler_verified and groups:
            up = merge_settings(groups, upper=True)
            if any(not s > 0 for (_, _, s) in up):
                sampled_eps = math.inf
            else:
                try:
                    events = [(FixedBatchGaussian(n, m, s, steps=c, neighbouring=rel), 1) for (n, m, s), c in up.items()]
                except DPAuditError:            # a multiplier past what the event takes (1e-300): no amplified bound
                    events = []
                rdp_eps = _epsilon(events, delta) if events else math.inf
                pld_eps = sampled_pld_epsilon(up, delta, neighbouring)
                routes = {"rdp": rdp_eps, **({"pld": pld_eps} if pld_eps is not None else {})}
                sampled_route = min(routes, key=lambda k: (routes[k], k != "rdp"))
                sampled_eps = routes[sampled_route]
            assumptions.append(f"Sampling: Flower's sample_nodes drew exactly m of the N connected clients uniformly "
                               f"without replacement each round (N in {sorted(pops)[:8]}, m in {sorted(sizes)[:8]}), "
                               "independently of the data; amplification holds while participation stays secret.")
            if len(up) < len(groups):
                assumptions.append(f"The rounds' {len(groups)} distinct settings are accounted in {len(up)} groups, each "
                                   "at its least private member (a valid upper bound; the lower bound takes the most "
                                   "private).")
            # the pair assumes the sampler that ran: with another sampler (one that never picks the target, say) it
            # is no lower bound, so none is given then
            lower = sampled_lower_bound(groups, delta)
    # per client: the rounds holding its reply compose exactly into one Gaussian of sensitivity 2C with
    # mu^2 = sum over its rounds of (2 / sigma_t)^2 (one pass over the rounds; one conversion per distinct mu)
    mu2: dict[int, float] = {}
    counts: dict[int, dict[float, int]] = {}
    if dp and noise_ok:
        with np.errstate(over="ignore", divide="ignore"):
            for r in released:
                s = sig[r.round]
                inv = math.inf if s <= 0.0 else float(np.float64(2.0) / np.float64(s)) ** 2 if s > 1e-150 else math.inf
                for node in r.replied:
                    mu2[node] = mu2.get(node, 0.0) + inv
                    per = counts.setdefault(node, {})
                    per[s] = per.get(s, 0) + 1
    memo: dict[float, float] = {}

    def part_of(node: int) -> float:
        m2 = mu2.get(node, 0.0)
        if m2 not in memo:
            memo[m2] = gaussian_rounds_epsilon(math.sqrt(m2), delta)
        return memo[m2]

    # the ledger reads each client's figure by the route that gave it: a PLD ledger (PldAccountant per party) takes
    # the exact Gaussian-DP composition of a client's own rounds and fixed_size_gaussian_pld of the amplified events;
    # an RDP ledger (where RDP gave the smaller amplified figure, or past the PLD ledger's limits) reads RDP figures
    write_ledger = dp and noise_ok and len(mu2) <= MAX_LEDGER_PARTIES
    can_amplify = bool(counts) and sampler_verified and bool(events) and math.isfinite(sampled_eps)
    pld_amplified = (can_amplify and sampled_route == "pld" and len(counts) <= MAX_PLD_LEDGER_PARTIES
                     and min(s for (_, _, s) in up) >= PLD_LEDGER_SIGMA_FLOOR)
    led = None
    rep = None          # the amplified parties' shared records (every one holds the same events) and figure
    if write_ledger and pld_amplified:
        # the ledger's own figure of the amplified events (its default grid 1e-4, finer than the route's 1e-3): the
        # number every amplified party reads; the run's amplified figure is the smaller of the two grids' (both valid).
        # Built once, in a ledger of its own: every amplified party holds the same records
        probe = PrivacyLedger(delta=delta, accountant="pld")
        try:
            for ev, c in events:
                probe.record("amplified", ev, c)
            rep = (probe.to_dict()["parties"]["amplified"], probe.epsilon("amplified"))
        except DPAuditError:
            rep = None
        if rep is not None and not rep[1] <= routes.get("rdp", math.inf):
            rep = None          # past the ledger's grid (inf) or above RDP: the RDP ledger reads less
        if rep is not None and rep[1] < sampled_eps:
            sampled_eps = routes["pld"] = rep[1]
    samp_all = sampled_eps if dp and noise_ok else math.inf
    amplified = {node for node in counts if can_amplify and samp_all <= part_of(node)}
    ledger_kind = "pld" if not amplified or (pld_amplified and rep is not None) else "rdp"
    led = PrivacyLedger(delta=delta, accountant=ledger_kind) if write_ledger else None
    per_client = []
    shared: dict[str, None] = {}      # amplified parties whose records are ``rep``'s, in client order
    order: list[str] = []
    if dp and noise_ok and len(mu2) > MAX_LEDGER_PARTIES:
        assumptions.append(f"No per-client ledger is written: {len(mu2)} clients took part, more than "
                           f"{MAX_LEDGER_PARTIES} (each party costs an RDP conversion); the figures above are complete.")
    local = run.local_dp
    local_eps_all = []
    local_memo: dict[int, float] = {}
    for node in clients:
        k = parts.get(node, 0)
        if not dp or not noise_ok:
            part_eps = math.inf if k else 0.0
        else:
            part_eps = part_of(node)
        samp = samp_all
        head = min(samp, part_eps)
        loc = None
        if local is not None:
            if k not in local_memo:
                std = local.noise_std
                if not k:
                    local_memo[k] = 0.0
                elif not (std > 0 and local.clipping_norm > 0):
                    local_memo[k] = math.inf
                else:
                    # each reply: Gaussian of sensitivity 2C (any clipped update for any other), std noise_std
                    with np.errstate(over="ignore", divide="ignore"):
                        mu = float(np.float64(2.0) * np.float64(local.clipping_norm) / np.float64(std)) * math.sqrt(k)
                    local_memo[k] = gaussian_rounds_epsilon(mu, delta)
            loc = local_memo[k]
            local_eps_all.append(loc)
        pid = run.partitions.get(str(node))
        if led is not None:
            party = f"node {node}" if pid is None else f"partition {pid}"
            order.append(party)
            if node in amplified and rep is not None:
                shared[party] = None
                head = min(head, rep[1])
            elif node in amplified:
                for ev, c in events:
                    led.record(party, ev, c)
            elif node in counts and math.isfinite(part_eps):
                per = counts[node]
                if len(per) == 1:
                    (s, c), = per.items()
                    led.record(party, SubsampledGaussian(1.0, s / 2.0, c), 1)
                else:   # several multipliers: their exact composition, one Gaussian of sensitivity 1 and mu
                    led.record(party, SubsampledGaussian(1.0, 1.0 / math.sqrt(mu2[node]), 1), 1)
            elif node in counts:
                led = None          # a client without a finite guarantee: the ledger would understate it
            if led is not None and party in led.parties:
                # the figure a claim naming this client reads: never above what it reads, so the same number
                head = min(head, led.epsilon(party))
        per_client.append(ClientFigure(node, pid, k, samp, part_eps, head, loc))
    if led is not None:
        led.add_assumption(assumptions[0])
        led.add_assumption("Per client: the smaller of the amplified run figure and the client's own rounds without "
                           "amplification (sensitivity 2C each). " + (
                               "The ledger accounts these events by privacy-loss distributions: a client's own rounds "
                               "by their exact Gaussian-DP composition, the amplified rounds by Dong-Roth-Su's "
                               "subsampling without replacement (fixed_size_gaussian_pld): the figures dpaudit reports."
                               if ledger_kind == "pld" else
                               "The ledger accounts these events by RDP (RDP gave the smaller amplified figure, or a "
                               f"PLD ledger's limits were passed: more than {MAX_PLD_LEDGER_PARTIES} clients, a "
                               f"multiplier below {PLD_LEDGER_SIGMA_FLOOR:g} or a loss range past its grid): at or "
                               "above the figures dpaudit reports."))
        ledger = led.to_dict()
        if shared and rep is not None:
            # the amplified parties' records, written in the ledger's own JSON form (schema 1; from_dict re-accounts
            # them), in the clients' order: the same as recording each, without building one PLD per party here
            parties, eps = ledger["parties"], ledger["epsilon"]
            ledger["parties"] = {p: (rep[0] if p in shared else parties[p]) for p in order if p in shared or p in parties}
            ledger["epsilon"] = {p: (rep[1] if p in shared else eps[p]) for p in ledger["parties"] if p in shared or p in eps}
    else:
        ledger = None
    overall = max((c.headline for c in per_client), default=math.inf if not dp else 0.0)
    if lower is not None and math.isfinite(sampled_eps) and sampled_eps < lower - 1e-9:
        raise ArithmeticError(f"internal error: upper bound {sampled_eps} below the certified lower bound {lower}")
    # Flower's figures
    flower: list[FlowerFigure] = []
    m = st.num_sampled_clients
    if (dp and noise_ok and released and m and not st.kind.endswith("adaptive") and st.noise_multiplier
            and st.noise_multiplier >= FLOWER_SIGMA_RANGE[0] and st.noise_multiplier <= FLOWER_SIGMA_RANGE[1]):
        n = population
        for conv in ("no-amplification", "without-replacement"):
            try:
                eps_f, src = flower_convention_epsilon(conv, n, m, float(st.noise_multiplier), len(released), delta)
            except (ValueError, ImportError, ArithmeticError):
                continue
            if math.isfinite(eps_f):
                flower.append(FlowerFigure(conv, eps_f, delta, src, lower is not None and eps_f < lower))
    if run.flower_accountant is not None:
        fe = _finite_number(run.flower_accountant.get("epsilon"))
        fd = _finite_number(run.flower_accountant.get("delta"))
        if fe is not None and fd is not None and 0 < fd < 1 and fe >= 0:
            flower.append(FlowerFigure("run", fe, fd, "run", lower is not None and math.isclose(fd, delta) and fe < lower))
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
             "rounds_below_declared": len(fewer),
             "sampled_routes": routes, "sampled_route": sampled_route,
             "groups": [{"population": n, "sample_size": m_, "noise_multiplier": s, "rounds": c}
                        for (n, m_, s), c in list(groups.items())[:1000]]}
    return FlowerAccounting(delta, neighbouring, st.kind, sampler_verified, population,
                            next(iter(sizes)) if len(sizes) == 1 else None, len(released), overall, sampled_eps, lower,
                            tuple(per_client), tuple(flower), tuple(flags), tuple(assumptions), ledger, local_max, facts)


#: The PLD route of the amplified figure is computed for multipliers in this range (below it the loss grid would
#: need millions of points; the RDP route covers every multiplier)
PLD_SIGMA_RANGE = (0.05, 1e4)


def sampled_pld_epsilon(groups: Mapping[tuple[int, int, float], int], delta: float, neighbouring: str) -> float | None:
    """The amplified figure's PLD route: each (N, m, sigma) setting's rounds as
    :func:`dpaudit.accountants.sampling.fixed_size_gaussian_pld` (Dong, Roth and Su's subsampling operator for m of N
    without replacement under replace-one; the Poisson Gaussian at sigma/2 under add/remove), composed, read at
    ``delta`` less the FFT allowance: a valid upper bound. The loss grid is 1e-3, coarser for small sigma (at most
    ~20,000 points per round; a coarser pessimistic grid only raises the figure). None where it does not apply
    (a multiplier outside :data:`PLD_SIGMA_RANGE`, delta at the FFT allowance, a grid the function refuses)."""
    if not groups or delta <= 2.0 * FFT_DELTA_ALLOWANCE:
        return None
    if any(not PLD_SIGMA_RANGE[0] <= s <= PLD_SIGMA_RANGE[1] for (_, _, s) in groups):
        return None
    smin = min(s for (_, _, s) in groups)
    grid = max(1e-3, (2.0 / smin ** 2 + 20.0 / smin) / _LB_POINTS)
    total = None
    try:
        for (n, m, s), c in groups.items():
            one = fixed_size_gaussian_pld(n, m, s, c, neighbouring=NEIGHBOURING[neighbouring],
                                          value_discretization_interval=grid)
            total = one if total is None else total.compose(one)
        with np.errstate(all="ignore"):
            eps = float(total.get_epsilon_for_delta(delta - FFT_DELTA_ALLOWANCE))
    except (DPAuditError, ArithmeticError, ValueError):
        return None
    return max(0.0, eps) if not math.isnan(eps) else None


#: Flower's own accountant is asked only for multipliers in this range (dp_accounting's RDP of a multiplier like
#: 1e-300 or 1e300 overflows or takes minutes; dpaudit's own figures cover every multiplier)
FLOWER_SIGMA_RANGE = (1e-3, 1e6)


def _finite_number(v: Any) -> float | None:
    """A finite float from a recorded JSON number, else None (a 401-digit integer is past the float range)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except (OverflowError, ValueError):
        return None
    return f if math.isfinite(f) else None

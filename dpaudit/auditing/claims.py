"""Claims files: parsing and validation of a TOML list of privacy claims into typed dataclasses.

A claims file (schema 1)::

    schema = 1                                  # optional

    [[claim]]
    name = "dpsgd-digits"                       # unique, required
    epsilon = 3.0                               # claimed epsilon, >= 0
    delta = 1e-5                                # claimed delta, in [0, 1)
    granularity = "example"                     # example (= record) | party | report | round | user
    description = "..."                         # optional
    # the subject: exactly one of
    mechanism = "dpsgd"                         # ldp | dpsgd | pate | gnmax | laplace | gaussian
    params = { dataset_size = 1437, batch_size = 64, noise_multiplier = 1.1, epochs = 20 }
    # release = "runs/fredy"                    # a release bundle directory (release.json)
    # factory = "net.py:build"                  # optional, release only: your copy of the code the bundle names
    # train_fn = "train.py:train"               #   (run only when its sha256 matches the bundle's record)
    # ledger = "ledger.json"                    # a PrivacyLedger.to_dict() JSON file
    # canary_audit = "audit/canary_audit.json"  # a certified canary audit (dpaudit lm audit --out): its run's
                                                #   accounting, and its certified bound as evidence (example level;
                                                #   a Flower audit's flower_canary_audit.json: user level)
    party = "client-0"                          # optional, release/ledger only: that party's figure
    allow_data_dependent = false                # optional (default false): true lets a data-dependent figure
                                                #   (PATE / GNMax on the votes: not itself DP) hold the claim
    attack = { kind = "threshold", shadows = 8, confidence = 0.95, seed = 0 }   # optional, release only
    # or, on any subject: a certified audit of a method's whole training run (dpaudit.auditing.method_audit)
    # attack = { kind = "method-run", method = "fredy", params = { gamma = 1.0, trials = 60 }, confidence = 0.95, seed = 0 }
    # or, on any subject: a white-box audit of your own training function (dpaudit.auditing.trainer_audit); with
    # mechanism = "dpsgd" its params are the declared recipe the recorded run is compared with
    # attack = { kind = "trainer", train_fn = "train.py:train", budget = "ci", seed = 0 }
    # (threat_model = "final-model": only the models it returns are scored, no recorded-run comparison)

Paths are relative to the claims file's directory. Everything that can be decided from the file alone is
checked here and raises :class:`~dpaudit.errors.ParameterError` (malformed TOML:
:class:`~dpaudit.errors.DataError`) naming the claim and the key: unknown keys, wrong types, out-of-range
values, a granularity the mechanism's accounting does not cover (usage errors, exit 2 in ``dpaudit check``).
A ``method-run`` attack's ``method`` and ``params`` are checked here too (a registered method, its audit's parameter
names, the types of their defaults, no ``seed``/``confidence``/``delta`` inside ``params``: those are the attack's
and the claim's), as is the claim's granularity against the neighbouring relation the audit's canary changes.
Facts about the subject that contradict the claim (a release accounted at another granularity or a larger
delta) make the claim *fail* instead; see :mod:`dpaudit.auditing.evaluate`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from dpaudit.accountants.granularity import GRANULARITIES, canonical_granularity
from dpaudit.errors import (ParameterError, check_bool, check_choice, check_float, check_int, check_path,
                            check_probability)

__all__ = [
    "GRANULARITIES",
    "MECHANISMS",
    "ATTACK_KINDS",
    "METHOD_RUN_GRANULARITIES",
    "CANARY_AUDIT_GRANULARITIES",
    "AttackBudget",
    "MechanismSubject",
    "ReleaseSubject",
    "LedgerSubject",
    "CanaryAuditSubject",
    "Claim",
    "ClaimsFile",
    "parse_claims",
    "load_claims",
]

MECHANISMS: tuple[str, ...] = ("ldp", "dpsgd", "pate", "gnmax", "laplace", "gaussian")
ATTACK_KINDS: tuple[str, ...] = ("threshold", "shadow", "lira", "canary", "method-run", "trainer")

#: Claim granularities a certified whole-run audit of each method (``attack.kind = "method-run"``) can refute. The
#: PATE family's and ProxyFL's canary is one record: a record-level bound refutes a claim at the record level and at
#: any level whose neighbours include a changed record (a party's or a user's whole data), but not a per-report or
#: per-round claim (one record changes many reports). PrivateKT's canary is a whole client (client-level
#: substitution), so its bound refutes only user-level claims.
METHOD_RUN_GRANULARITIES: dict[str, tuple[str, ...]] = {
    "pate": ("example", "party", "user"),
    "fedkt": ("example", "party", "user"),
    "fredy": ("example", "party", "user"),
    "proxyfl": ("example", "party", "user"),
    "privatekt": ("user",),
}

#: Granularities a ``canary_audit`` subject can have: ``example`` for a record-level canary audit
#: (``canary_audit.json``), ``user`` for a Flower canary audit (``flower_canary_audit.json``, one canary is one
#: client); which one applies is read from the file when the claim is evaluated.
CANARY_AUDIT_GRANULARITIES: tuple[str, ...] = ("example", "user")

#: Granularities each mechanism's accounting covers. laplace/gaussian: the unit their sensitivity is defined
#: over, so any; ldp: one report ("report", or "round": one report per round), or with ``rounds`` a user's whole
#: participation ("user").
MECHANISM_GRANULARITIES: dict[str, tuple[str, ...]] = {
    "laplace": GRANULARITIES,
    "gaussian": GRANULARITIES,
    "dpsgd": ("example",),
    "gnmax": ("example",),
    "pate": ("example", "party"),
    "ldp": ("report", "round", "user"),
}

_CLAIM_KEYS = {"name", "epsilon", "delta", "granularity", "description", "mechanism", "params", "release",
               "ledger", "party", "attack", "allow_data_dependent", "factory", "train_fn", "canary_audit"}
_ATTACK_KEYS = {"kind", "shadows", "confidence", "seed", "audit", "canary", "canaries", "models", "method", "params"}
_METHOD_RUN_KEYS = {"kind", "method", "params", "confidence", "seed"}
_TOP_KEYS = {"schema", "claim"}


@dataclass(frozen=True, slots=True)
class AttackBudget:
    """An attack to run against a release: ``kind``, number of ``shadows`` models, the ``confidence`` of the
    empirical epsilon lower bound (e.g. 0.95), and its ``seed``. ``kind = "canary"``: a certified canary audit of
    the release's DP-SGD recipe (``audit`` one-run|multi-run, ``canary`` dirac|mislabeled|ood, ``canaries`` m,
    ``models`` N); only certified bounds can fail a claim. ``kind = "method-run"``: the certified audit of
    ``method``'s whole training run (:func:`dpaudit.auditing.method_audit.audit_method_run`) with the audit parameters
    ``params`` and this budget's ``seed`` and ``confidence`` (and the claim's delta where the audit takes one)."""

    kind: str
    shadows: int = 8
    confidence: float = 0.95
    seed: int = 0
    audit: str = "one-run"
    canary: str = "dirac"
    canaries: int = 1000
    models: int = 200
    method: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MechanismSubject:
    """A mechanism described by its parameters, accounted with the matching ``account_*`` function."""

    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        return f"mechanism {self.kind}"


@dataclass(frozen=True, slots=True)
class ReleaseSubject:
    """A release bundle directory; its accounted epsilon comes from ``release.json``. ``factory`` / ``train_fn``:
    the user's copy of the code the bundle names, for attacks that load its model or train shadow models (see
    :class:`~dpaudit.training.usercode.BundleCode`)."""

    path: Path
    factory: str | None = None
    train_fn: str | None = None

    def describe(self) -> str:
        return f"release {self.path}"


@dataclass(frozen=True, slots=True)
class LedgerSubject:
    """A ``PrivacyLedger.to_dict()`` JSON file."""

    path: Path

    def describe(self) -> str:
        return f"ledger {self.path}"


@dataclass(frozen=True, slots=True)
class CanaryAuditSubject:
    """A certified canary audit's ``canary_audit.json`` (e.g. ``dpaudit lm audit --out``; example level: one canary
    is one record) or a Flower canary audit's ``flower_canary_audit.json`` (``dpaudit flower audit --out``; user
    level: one canary is one client, client-level replace-one): its accounted epsilon is the audited run's own
    accounting, its certified lower bound the evidence."""

    path: Path

    def describe(self) -> str:
        return f"canary audit {self.path}"


Subject = MechanismSubject | ReleaseSubject | LedgerSubject | CanaryAuditSubject


@dataclass(frozen=True, slots=True)
class Claim:
    """One privacy claim: ``subject`` is (``epsilon``, ``delta``)-DP at ``granularity``."""

    name: str
    epsilon: float
    delta: float
    granularity: str
    subject: Subject
    party: str | None = None
    attack: AttackBudget | None = None
    allow_data_dependent: bool = False
    description: str = ""


@dataclass(frozen=True, slots=True)
class ClaimsFile:
    path: Path | None
    claims: tuple[Claim, ...]


def _unknown(keys: set[str], allowed: set[str], where: str) -> None:
    extra = sorted(keys - allowed)
    if extra:
        raise ParameterError(f"Unknown key {extra[0]!r} in {where}; allowed keys: {', '.join(sorted(allowed))}.")


def _string(value: Any, name: str, owner: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ParameterError(f"The '{name}' parameter of {owner} must be a non-empty string. Got {value!r} instead.")
    return value


def _path(value: Any, name: str, owner: str, base: Path) -> Path:
    p = Path(_string(value, name, owner)).expanduser()
    return p if p.is_absolute() else base / p


def _code_path(value: Any, name: str, owner: str, base: Path) -> str | None:
    """``FILE.py:NAME`` (a relative file taken from the claims file's folder) or ``module:NAME``, form checked."""
    from dpaudit.training.usercode import parse_import_path

    if value is None:
        return None
    try:
        ip = parse_import_path(value, name)
    except ParameterError as exc:
        raise ParameterError(f"{owner.capitalize()}: {exc}") from None
    return f"{_path(ip.target, name, owner, base)}:{ip.name}" if ip.is_file else value


def _method_run_attack(a: Mapping[str, Any], owner: str, granularity: str) -> AttackBudget:
    """Validate a ``kind = "method-run"`` attack table against the registered method audits."""
    from dpaudit.auditing.method_audit import METHOD_RUN_AUDITS, check_method_params

    _unknown(set(a), _METHOD_RUN_KEYS, f"{owner} (kind = \"method-run\")")
    if "method" not in a:
        raise ParameterError(f"The 'method' parameter of {owner} is required for kind = \"method-run\". "
                             f"Got nothing instead.")
    method = check_choice(a["method"], "method", owner, tuple(METHOD_RUN_AUDITS))
    allowed = METHOD_RUN_GRANULARITIES.get(method)
    if allowed is None:
        raise ParameterError(f"The 'method' parameter of {owner} names an audit whose neighbouring relation is not "
                             f"stated in METHOD_RUN_GRANULARITIES; stated: "
                             f"{', '.join(sorted(METHOD_RUN_GRANULARITIES))}. Got {method!r} instead.")
    if granularity not in allowed:
        raise ParameterError(
            f"The 'granularity' parameter of the claim must be one of {', '.join(repr(g) for g in allowed)} for a "
            f"{method!r} method-run audit (the neighbouring relation its canary changes). Got {granularity!r} instead.")
    params = a.get("params", {})
    if not isinstance(params, Mapping):
        raise ParameterError(f"The 'params' parameter of {owner} must be a table. Got {params!r:.60} instead.")
    check_method_params(method, params, owner, {"seed": "the attack's 'seed'", "confidence": "the attack's 'confidence'",
                                                 "delta": "the claim's 'delta'"})
    return AttackBudget(
        kind="method-run", method=method, params=dict(params),
        confidence=check_probability(a.get("confidence", 0.95), "confidence", owner),
        seed=check_int(a.get("seed", 0), "seed", owner, low=0),
    )


def _parse_claim(raw: Any, index: int, base: Path) -> Claim:
    if not isinstance(raw, Mapping):
        raise ParameterError(f"Claim #{index + 1} must be a table ([[claim]]). Got {raw!r:.60} instead.")
    name = _string(raw.get("name"), "name", f"claim #{index + 1}")
    owner = f"claim {name!r}"
    _unknown(set(raw), _CLAIM_KEYS, owner)
    for key in ("epsilon", "delta", "granularity"):
        if key not in raw:
            raise ParameterError(f"The '{key}' parameter of {owner} is required. Got nothing instead.")
    epsilon = check_float(raw["epsilon"], "epsilon", owner, low=0.0)
    delta = check_probability(raw["delta"], "delta", owner, allow_zero=True)
    granularity = canonical_granularity(raw["granularity"], "granularity", owner)
    allow_dd = check_bool(raw.get("allow_data_dependent", False), "allow_data_dependent", owner)
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise ParameterError(f"The 'description' parameter of {owner} must be a string. Got {description!r} instead.")

    given = [k for k in ("mechanism", "release", "ledger", "canary_audit") if k in raw]
    if len(given) != 1:
        raise ParameterError(
            f"{owner.capitalize()} needs exactly one subject: 'mechanism', 'release', 'ledger' or 'canary_audit'. "
            f"Got {', '.join(repr(g) for g in given) or 'none'} instead."
        )
    kind = given[0]
    if "params" in raw and kind != "mechanism":
        raise ParameterError(f"The 'params' parameter of {owner} applies to 'mechanism' subjects only. Got a {kind} subject instead.")
    method_run = isinstance(raw.get("attack"), Mapping) and raw["attack"].get("kind") in ("method-run", "trainer")
    if "attack" in raw and kind != "release" and not method_run:
        raise ParameterError(f"The 'attack' parameter of {owner} applies to 'release' subjects only. Got a {kind} subject instead.")
    for key in ("factory", "train_fn"):
        if key in raw and kind != "release":
            raise ParameterError(f"The '{key}' parameter of {owner} applies to 'release' subjects only. Got a {kind} subject instead.")
    if "party" in raw and kind == "mechanism":
        raise ParameterError(f"The 'party' parameter of {owner} applies to 'release' and 'ledger' subjects only. Got a mechanism subject instead.")

    subject: Subject
    if kind == "mechanism":
        mech = check_choice(raw["mechanism"], "mechanism", owner, MECHANISMS)
        params = raw.get("params", {})
        if not isinstance(params, Mapping):
            raise ParameterError(f"The 'params' parameter of {owner} must be a table. Got {params!r:.60} instead.")
        if "delta" in params:
            raise ParameterError(f"The 'params' parameter of {owner} must not set 'delta': the claim's delta is used. Got delta={params['delta']!r} instead.")
        allowed = MECHANISM_GRANULARITIES[mech]
        if mech == "ldp":
            allowed = ("user",) if params.get("rounds") is not None else ("report", "round")
        if granularity not in allowed:
            raise ParameterError(
                f"The 'granularity' parameter of {owner} must be one of {', '.join(repr(a) for a in allowed)} for a "
                f"{mech!r} mechanism{' with these params' if mech == 'ldp' else ''} (what its accounting covers). "
                f"Got {granularity!r} instead."
            )
        if mech == "pate" and "granularity" in params and params["granularity"] != granularity:
            raise ParameterError(
                f"The 'params.granularity' of {owner} ({params['granularity']!r}) differs from the claim's granularity. Got {granularity!r} instead."
            )
        subject = MechanismSubject(kind=mech, params=dict(params))
    elif kind == "release":
        subject = ReleaseSubject(path=_path(raw["release"], "release", owner, base),
                                 factory=_code_path(raw.get("factory"), "factory", owner, base),
                                 train_fn=_code_path(raw.get("train_fn"), "train_fn", owner, base))
    elif kind == "canary_audit":
        # the file's kind decides which of the two at evaluation time (dpaudit.auditing.evaluate): a record-level
        # canary audit (canary_audit.json: 'example') or a Flower canary audit (flower_canary_audit.json: 'user')
        if granularity not in CANARY_AUDIT_GRANULARITIES:
            raise ParameterError(f"The 'granularity' parameter of {owner} must be 'example' for a canary_audit subject "
                                 "(one canary is one record), or 'user' for a Flower canary audit (one canary is one "
                                 f"client). Got {granularity!r} instead.")
        if "party" in raw:
            raise ParameterError(f"The 'party' parameter of {owner} applies to 'release' and 'ledger' subjects only. "
                                 "Got a canary_audit subject instead.")
        subject = CanaryAuditSubject(path=_path(raw["canary_audit"], "canary_audit", owner, base))
    else:
        subject = LedgerSubject(path=_path(raw["ledger"], "ledger", owner, base))

    party = None if "party" not in raw else _string(raw["party"], "party", owner)
    attack = None
    if "attack" in raw:
        a = raw["attack"]
        if not isinstance(a, Mapping):
            raise ParameterError(f"The 'attack' parameter of {owner} must be a table like {{kind = \"threshold\"}}. Got {a!r:.60} instead.")
        if a.get("kind") != "trainer":     # the trainer audit checks its own keys
            _unknown(set(a), _ATTACK_KEYS, f"the attack of {owner}")
        aowner = f"the attack of {owner}"
        if "kind" not in a:
            raise ParameterError(f"The 'kind' parameter of {aowner} is required. Got nothing instead.")
        if a.get("kind") == "trainer":      # a user's own training function, white-box (auditing.trainer_audit)
            from dpaudit.auditing.trainer_audit import parse_trainer_attack

            t = parse_trainer_attack(a, aowner, granularity, base)
            attack = AttackBudget(kind="trainer", params=t["params"], confidence=t["confidence"], seed=t["seed"])
        elif method_run:
            attack = _method_run_attack(a, aowner, granularity)
        else:
            for key in ("method", "params"):
                if key in a:
                    raise ParameterError(f"The '{key}' parameter of {aowner} applies to kind = \"method-run\" only. "
                                         f"Got kind = {a['kind']!r} instead.")
            from dpaudit.auditing.attack_release import MAX_SEED, MAX_SHADOWS   # (the attack layer: loaded when used)
            from dpaudit.training.canaries import MAX_CANARIES
            from dpaudit.training.limits import MAX_MODELS

            attack = AttackBudget(
                kind=check_choice(a["kind"], "kind", aowner, ATTACK_KINDS),
                shadows=check_int(a.get("shadows", 8), "shadows", aowner, low=1, high=MAX_SHADOWS),
                confidence=check_probability(a.get("confidence", 0.95), "confidence", aowner),
                seed=check_int(a.get("seed", 0), "seed", aowner, low=0, high=MAX_SEED),
                audit=check_choice(a.get("audit", "one-run"), "audit", aowner, ("one-run", "multi-run")),
                canary=check_choice(a.get("canary", "dirac"), "canary", aowner, ("dirac", "mislabeled", "ood")),
                canaries=check_int(a.get("canaries", 1000), "canaries", aowner, low=2, high=MAX_CANARIES),
                models=check_int(a.get("models", 200), "models", aowner, low=2, high=MAX_MODELS),
            )
    return Claim(name=name, epsilon=epsilon, delta=delta, granularity=granularity, subject=subject, party=party,
                 attack=attack, allow_data_dependent=allow_dd, description=description)


def parse_claims(data: Mapping[str, Any], *, base_dir: str | Path = ".", path: str | Path | None = None) -> ClaimsFile:
    """Validate a parsed claims document (the TOML as a dict) into a :class:`ClaimsFile`."""
    if not isinstance(data, Mapping):
        raise ParameterError(f"A claims document must be a table. Got {type(data).__name__} instead.")
    _unknown(set(data), _TOP_KEYS, "the claims file")
    if "schema" in data and data["schema"] != 1:
        raise ParameterError(f"The 'schema' parameter of the claims file must be 1. Got {data['schema']!r} instead.")
    raw_claims = data.get("claim")
    if not isinstance(raw_claims, list) or not raw_claims:
        raise ParameterError("The claims file must list at least one [[claim]] table. Got none instead.")
    base = Path(base_dir)
    claims = tuple(_parse_claim(raw, i, base) for i, raw in enumerate(raw_claims))
    seen: set[str] = set()
    for c in claims:
        if c.name in seen:
            raise ParameterError(f"Claim names must be unique. Got {c.name!r} twice instead.")
        seen.add(c.name)
    return ClaimsFile(path=None if path is None else Path(path), claims=claims)


def load_claims(path: str | Path) -> ClaimsFile:
    """Read and validate a claims TOML file (paths inside it are relative to its directory)."""
    from dpaudit._io import load_toml_file

    p = check_path(path, "claims", "dpaudit.check")
    data = load_toml_file(p, "the claims file")
    return parse_claims(data, base_dir=p.parent, path=p)

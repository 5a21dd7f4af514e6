"""The one vocabulary of privacy granularities (neighbouring relations), shared by claims files, release bundles
and ``dpaudit release make``.

=============  ==============================================================================================
``example``    neighbouring datasets differ in one record (added / removed, or replaced): record-level DP, what
               DP-SGD (dpaudit's own, Opacus, dp_accounting's Poisson-sampled Gaussian), PATE's example level and
               ProxyFL's per-client DP-SGD account
``party``      in one party's whole data (a FedKT / PATE teacher partition)
``report``     in one local-DP report
``round``      in one client's reports of one round (local DP per round)
``user``       in one user's / client's whole participation
=============  ==============================================================================================

A release that makes no privacy claim (epsilon infinite) states granularity ``none``. What a user types (a claims
file, ``release make --claim``, the Python API) must be one of these names or ``record`` (the same as ``example``);
any other name is refused with the list, so that a claim is never silently read at another relation than the one its
author meant: ``client`` is refused with a hint (client-level DP, one client's whole data, is ``user``). Release
files on disk written by older versions stay readable: their spellings (``sample``, ``client``, and the descriptive
strings dpaudit's own methods wrote, e.g. ``record (add/remove one)``) are read as their canonical names
(``legacy=True``). So a claim at ``example`` level and a release "accounted per record (add/remove one)" speak of
the same relation and can be compared.
"""

from __future__ import annotations

from typing import Any

from dpaudit.errors import ParameterError, format_value

__all__ = ["GRANULARITIES", "RELEASE_GRANULARITIES", "GRANULARITY_ALIASES", "LEGACY_GRANULARITY_ALIASES",
           "canonical_granularity"]

GRANULARITIES: tuple[str, ...] = ("example", "party", "report", "round", "user")
#: What a release's ``claim.granularity`` may be: a granularity, or ``none`` (no privacy claimed).
RELEASE_GRANULARITIES: tuple[str, ...] = GRANULARITIES + ("none",)

#: Other spellings a user may type (compared case-insensitively, surrounding blanks ignored).
GRANULARITY_ALIASES: dict[str, str] = {
    "record": "example",
}

#: Spellings read only from release files that older versions wrote (``canonical_granularity(..., legacy=True)``).
LEGACY_GRANULARITY_ALIASES: dict[str, str] = {
    **GRANULARITY_ALIASES,
    "sample": "example",
    "client": "user",
    # descriptive strings written by dpaudit's own methods before this vocabulary (releases on disk stay readable)
    "record (add/remove one)": "example",
    "record, per client (add/remove one)": "example",
    "client (local dp), whole training": "user",
    "client (local dp), per round": "round",
}


def canonical_granularity(value: Any, name: str, owner: str, *, allow_none: bool = False,
                          legacy: bool = False) -> str:
    """The canonical name of granularity ``value`` (see the module docstring), or a :class:`ParameterError` naming
    ``name`` of ``owner`` with the allowed values. ``allow_none``: also accept ``none`` (a release without a claim);
    ``legacy``: also read the spellings of release files older versions wrote (``client``, ``sample``, ...)."""
    allowed = RELEASE_GRANULARITIES if allow_none else GRANULARITIES
    aliases = LEGACY_GRANULARITY_ALIASES if legacy else GRANULARITY_ALIASES
    hint = ""
    if isinstance(value, str):
        key = value.strip().lower()
        key = aliases.get(key, key)
        if key in allowed:
            return key
        if key in LEGACY_GRANULARITY_ALIASES:
            hint = f" ({key!r} is not a granularity name: did you mean {LEGACY_GRANULARITY_ALIASES[key]!r}?)"
    shown = ", ".join(repr(g) for g in allowed)
    raise ParameterError(f"The '{name}' parameter of {owner} must be one of {shown} (or 'record', the same as "
                         f"'example'). Got {format_value(value)} instead{hint}.")

"""pytest helpers: make a test fail when a privacy claim does not hold.

Two kinds of claim:

- **accounted** — :func:`assert_epsilon_at_most` checks a figure an accountant produced (an
  :class:`~dpaudit.accountants.statement.AccountingResult`, a
  :class:`~dpaudit.accountants.statement.PrivacyStatement` or a ``PrivacyLedger``) against a budget;
- **implemented** — :func:`assert_mechanism_private` runs a mechanism implementation many times on two
  neighbouring inputs and tests the claim statistically (:func:`dpaudit.attacks.mechanism_audit.audit_mechanism`);
  a correct implementation fails with probability at most ``alpha``, and a fixed ``seed`` makes the
  outcome deterministic.

Example::

    def laplace(x, rng, size):
        return x + rng.laplace(0.0, 1.0 / 0.5, size)

    def test_laplace_is_private():
        assert_mechanism_private(laplace, (0.0, 1.0), epsilon=0.5, delta=0.0)
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from dpaudit._format import fmt_number
from dpaudit.accountants.statement import AccountingResult, PrivacyStatement
from dpaudit.attacks.mechanism_audit import MechanismAuditResult, audit_mechanism
from dpaudit.errors import ParameterError, check_float, check_probability

__all__ = ["assert_epsilon_at_most", "assert_mechanism_private", "statement_of"]


def statement_of(subject: Any, *, party: str | None = None) -> PrivacyStatement:
    """The headline :class:`PrivacyStatement` of an accounting result, a statement, or a ledger.

    A ledger (anything with ``overall()`` and ``statement(party)``, see ``PrivacyLedger`` in
    ``dpaudit/training/CONTRACTS.md``) gives its ``overall()`` statement (the max over parties), or the
    statement of ``party`` when one is named.
    """
    if isinstance(subject, PrivacyStatement):
        if party is not None:
            raise ParameterError("The 'party' parameter applies to ledgers only. Got a PrivacyStatement instead.")
        return subject
    if isinstance(subject, AccountingResult):
        if party is not None:
            raise ParameterError("The 'party' parameter applies to ledgers only. Got an AccountingResult instead.")
        return subject.statement
    if callable(getattr(subject, "overall", None)) and callable(getattr(subject, "statement", None)):
        if party is None:
            return subject.overall()
        parties = tuple(getattr(subject, "parties", ()))
        if parties and party not in parties:
            raise ParameterError(f"The 'party' parameter must be one of the ledger's parties {parties}. Got {party!r} instead.")
        return subject.statement(party)
    raise ParameterError(
        "The subject must be an AccountingResult, a PrivacyStatement or a PrivacyLedger. "
        f"Got {type(subject).__name__} instead."
    )


def _describe_statement(st: PrivacyStatement) -> str:
    parts = [f"epsilon={st.epsilon:.6g}", f"delta={fmt_number(st.delta)}", f"method={st.method}"]
    if st.order is not None:
        parts.append(f"order={st.order:g}")
    if st.label:
        parts.append(f"label={st.label!r}")
    text = ", ".join(parts)
    if st.data_dependent:
        text += " [DATA-DEPENDENT: the figure depends on private data and is not itself DP]"
    if st.assumptions:
        text += ". Assumptions: " + " ".join(st.assumptions)
    return text


def assert_epsilon_at_most(
    subject: Any,
    epsilon: float,
    delta: float | None = None,
    *,
    party: str | None = None,
    allow_data_dependent: bool = True,
) -> PrivacyStatement:
    """Fail (``AssertionError``) unless the accounted epsilon of ``subject`` is at most ``epsilon``.

    Parameters
    ----------
    subject:
        ``AccountingResult`` (its headline statement), ``PrivacyStatement``, or ``PrivacyLedger`` (its overall
        statement, or ``party``'s).
    epsilon:
        The budget, >= 0. The check is ``accounted <= epsilon`` with no tolerance: accountants round up.
    delta:
        If given, the statement's delta must also be at most ``delta`` (a guarantee at a smaller delta implies
        one at a larger delta with the same epsilon; a larger delta does not support the claim).
    allow_data_dependent:
        If False, a data-dependent figure (not itself DP) fails the assertion whatever its value.

    Returns
    -------
    PrivacyStatement
        The statement that was checked, for further assertions.
    """
    owner = "assert_epsilon_at_most"
    epsilon = check_float(epsilon, "epsilon", owner, low=0.0)
    if delta is not None:
        delta = check_probability(delta, "delta", owner, allow_zero=True)
    st = statement_of(subject, party=party)
    who = f" for party {party!r}" if party is not None else ""
    problems = []
    if not st.epsilon <= epsilon:  # also catches nan
        problems.append(f"accounted epsilon {st.epsilon:.6g} exceeds the claimed {fmt_number(epsilon)}")
    if delta is not None and st.delta > delta:
        problems.append(f"accounted delta {fmt_number(st.delta)} exceeds the claimed {fmt_number(delta)}")
    if not allow_data_dependent and st.data_dependent:
        problems.append("the figure is data-dependent (not itself differentially private)")
    if problems:
        raise AssertionError(f"Privacy claim does not hold{who}: " + "; ".join(problems) + f". Accounted: {_describe_statement(st)}")
    return st


def assert_mechanism_private(
    mechanism: Callable[..., Any],
    neighbouring_inputs: Sequence[Any],
    epsilon: float,
    delta: float = 0.0,
    *,
    samples: int = 100_000,
    alpha: float = 1e-3,
    seed: int = 0,
    **options: Any,
) -> MechanismAuditResult:
    """Fail (``AssertionError`` carrying the witness event) when a statistical test refutes that ``mechanism``
    is (epsilon, delta)-DP on the pair ``neighbouring_inputs``.

    ``mechanism(input, rng) -> output`` or the vectorised ``mechanism(input, rng, size) -> outputs``
    (faster; detected from the signature). A mechanism satisfying the claim fails with probability at most
    ``alpha`` (Bonferroni over everything the test tries); ``seed`` makes the outcome deterministic.
    ``options`` go to :func:`~dpaudit.attacks.mechanism_audit.audit_mechanism` (``statistic``, ``testers``,
    ``bins``, ``vectorized``...). Passing does not prove privacy: it means these samples found no
    violation. Returns the :class:`MechanismAuditResult`.
    """
    result = audit_mechanism(
        mechanism, neighbouring_inputs, epsilon, delta, samples=samples, alpha=alpha, seed=seed, **options
    )
    if not result.passed:
        raise AssertionError(result.summary())
    return result

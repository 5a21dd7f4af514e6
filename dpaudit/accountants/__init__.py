"""Accounting: the theoretical epsilon of DP events.

Pure math on :mod:`~dpaudit.accountants.events`; imports numpy, scipy and dp_accounting only (never torch or
scikit-learn, never another dpaudit layer but ``errors``/``_io``).

Registration is explicit and one-way: this ``__init__`` imports every mechanism module, and each registers the RDP
of its events with :func:`~dpaudit.accountants.base.register_rdp` when imported. Mechanism modules import
``base`` (and ``_common`` for shared helpers), never the reverse, so there is no import circle.
"""

from dpaudit.accountants import events, base, rdp, order_search, pure, ldp, pate, gnmax, pld, dpsgd, smooth_sensitivity  # noqa: F401
from dpaudit.accountants import sampling, prv, tuning  # noqa: F401
from dpaudit.accountants import closed_form, ledger, mechanisms  # noqa: F401
from dpaudit.accountants.events import *  # noqa: F401,F403
from dpaudit.accountants.statement import AccountingResult, PrivacyStatement, headline_facts, pick_headline, smallest_route
from dpaudit.accountants.base import Accountant, UnsupportedEventError, register_rdp, rdp_function_for
from dpaudit.accountants.rdp import *  # noqa: F401,F403
from dpaudit.accountants.order_search import OrderSearch, search_rdp_orders
from dpaudit.accountants.pure import *  # noqa: F401,F403
from dpaudit.accountants.pld import *  # noqa: F401,F403
from dpaudit.accountants.ldp import *  # noqa: F401,F403
from dpaudit.accountants.dpsgd import *  # noqa: F401,F403
from dpaudit.accountants.pate import *  # noqa: F401,F403
from dpaudit.accountants.gnmax import *  # noqa: F401,F403
from dpaudit.accountants.smooth_sensitivity import *  # noqa: F401,F403
from dpaudit.accountants.closed_form import *  # noqa: F401,F403
from dpaudit.accountants.mechanisms import *  # noqa: F401,F403
from dpaudit.accountants.ledger import *  # noqa: F401,F403
from dpaudit.accountants.sampling import *  # noqa: F401,F403
from dpaudit.accountants.prv import *  # noqa: F401,F403
from dpaudit.accountants.tuning import *  # noqa: F401,F403

__all__ = [
    "ACCOUNTING_FUNCTIONS", "Accountant", "AccountingResult", "BudgetExceededError", "Composed", "DEFAULT_ORDERS",
    "DPSGD_ASSUMPTIONS", "DpEvent", "EdgeOrderWarning", "GaussianNoisyMax", "LaplaceNoisyMax", "MECHANISM_KINDS",
    "MOMENT_ORDERS", "MomentsAccountant", "PldAccountant", "PrivacyLedger", "PrivacyStatement", "PureDp",
    "RandomizedResponse", "RdpAccountant", "Repeated", "ShuffleBound", "Shuffled", "SmoothSensitivityRelease",
    "SubsampledGaussian", "UnsupportedEventError", "account_dpsgd", "account_gnmax", "account_ldp",
    "account_mechanism", "account_pate", "data_dependence_note", "data_independent_log_moments", "debias",
    "debias_reports", "debias_variance", "debias_variance_bound", "dpsgd_steps", "event_assumptions",
    "event_from_dict", "fedkt_privacy", "fedkt_z", "gaussian_log_q", "gaussian_mechanism", "one_switch_flips",
    "threshold_log_pr", "rdp_threshold_data_dependent",
    "gaussian_mechanism_epsilon", "gnmax_dd_applies", "gnmax_step_bounds", "laplace_log_moments", "laplace_log_q",
    "laplace_mechanism", "laplace_total_log_moments", "load_votes", "local_sensitivity_bounds_gnmax",
    "log_gaussian_delta", "moments_to_epsilon", "parse_orders", "pure_composition_delta", "pure_composition_epsilon",
    "rdp_function_for", "rdp_gnmax_data_dependent", "rdp_gnmax_data_independent", "rdp_gnss", "rdp_laplace_noisy_max",
    "rdp_pure_dp", "rdp_randomized_response", "rdp_subsampled_gaussian", "rdp_threshold", "rdp_to_epsilon",
    "register_rdp", "release_noisy_epsilon", "rr_epsilon_from_keep_probability", "rr_keep_probability",
    "shuffle_closed_form", "shuffle_delta", "shuffle_numerical", "shuffle_pld", "smooth_sensitivity_gnmax",
    "local_sensitivity_bounds_threshold", "mu2_from_log_q", "gnmax_mu2", "rdp_gnmax_mu2", "threshold_log_q", "threshold_mu2",
    "load_answered", "release_gnmax_epsilon", "OrderSearch", "search_rdp_orders",
    "FixedBatchGaussian", "ShuffledBatchGaussian", "RandomStoppingTuning", "NEIGHBOURING_RELATIONS", "tnb_expected_runs",
    "rdp_wor_gaussian", "rdp_fixed_batch", "rdp_shuffled_batches", "shuffle_lower_bound", "ShuffleLowerBound",
    "poisson_equivalent", "PrvAccountant", "account_tuning", "rdp_random_stopping", "tnb_gamma_for_mean",
    "RUNS_DISTRIBUTIONS", "SAMPLING_SCHEMES", "dpsgd_event", "smallest_route", "pick_headline", "headline_facts",
]

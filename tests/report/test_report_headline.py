"""Issue 27 item 4: the report marks the same headline, by route, as the accounting result it was given."""

import numpy as np

from dpaudit.serial import to_dict
from dpaudit.accountants import account_pate
from dpaudit.report.flags import compute_flags
from dpaudit.report.render import to_markdown
from dpaudit.report.schema import AuditReport, ModelAudit


def _report(theoretical: dict) -> tuple[str, list[str]]:
    m = ModelAudit(name="m", method="pate", release="runs/x", utility={"test_accuracy": 0.9}, theoretical=theoretical,
                   attacks=(), noise=0.05, noise_label="gamma", num_train=1000)
    return to_markdown(AuditReport(title="t", seed=0, dataset={}, models=(m,), flags=())), [f.code for f in compute_flags([m])]


def test_report_marks_the_result_headline_by_route():
    for votes, gamma, route in ((np.tile([250.0] + [0.0] * 9, (100, 1)), 0.05, "data-dependent"),
                                (np.array([[5.0, 5.0, 5.0]] * 10), 1.0, "data-independent")):
        r = account_pate(votes, gamma=gamma, delta=1e-5)
        assert r.headline_route == route
        doc, flags = _report(to_dict(r))
        marked = [line for line in doc.splitlines() if "— headline" in line]
        assert len(marked) == 1 and f"— headline (route {route})" in marked[0] and r.statement.label in marked[0]
        # a data-dependent headline is flagged; the data-independent one (picked on a tie) is not
        assert ("data_dependent_epsilon" in flags) == (route == "data-dependent")


def test_report_shows_the_certified_lower_bound():
    # issue 33: the accounting section shows the interval and the pair (Markdown; HTML uses the same rows)
    from dpaudit.accountants import account_dpsgd
    from dpaudit.report.render import to_html

    r = account_dpsgd(dataset_size=600, batch_size=25, noise_multiplier=1.1, steps=70, delta=1e-5)
    doc, _ = _report(to_dict(r))
    rows = [line for line in doc.splitlines() if "certified lower bound" in line]
    assert len(rows) == 1 and "explicit pair: target +1C" in rows[0] and "ε in \\[" in rows[0]   # "[" escaped in Markdown (dpaudit._escape)
    m = ModelAudit(name="m", method="dpsgd", release="runs/x", utility={}, theoretical=to_dict(r), attacks=(),
                   noise=1.1, noise_label="sigma", num_train=600)
    assert "certified lower bound" in to_html(AuditReport(title="t", seed=0, dataset={}, models=(m,), flags=()))
    # a result written before issue 33 (no lower_bound) renders as before
    old = {k: v for k, v in to_dict(r).items() if k != "lower_bound"}
    assert "certified lower bound" not in _report(old)[0]

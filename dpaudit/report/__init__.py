"""Reports: join releases, their ledgers and attack results into report.json / .md / .html + figures."""

from dpaudit.report.flags import compute_flags
from dpaudit.report.render import to_html, to_markdown, write_report
from dpaudit.report.schema import SCHEMA, AttackSummary, AuditReport, Flag, ModelAudit, Verdict
from dpaudit.report.verdict import attack_power, compute_verdicts, verdict

__all__ = ["SCHEMA", "AttackSummary", "AuditReport", "Flag", "ModelAudit", "Verdict", "attack_power",
           "compute_flags", "compute_verdicts", "verdict", "to_html", "to_markdown", "write_report"]

"""Reports: join releases, their ledgers and attack results into report.json / .md / .html + figures."""

from dpaudit.report.flags import compute_flags
from dpaudit.report.render import to_html, to_markdown, write_report
from dpaudit.report.schema import SCHEMA, AttackSummary, AuditReport, Flag, ModelAudit

__all__ = ["SCHEMA", "AttackSummary", "AuditReport", "Flag", "ModelAudit", "compute_flags", "to_html", "to_markdown", "write_report"]

"""Certified canary audits of each method's *full training run* (its real round loop / teacher training / proxy
training, not only its privatization function).

One module per method family; each exports ``audit_run(**params) -> MethodRunAudit``. The public entry point is
:func:`dpaudit.auditing.method_audit.audit_method_run`.
"""

__all__: list[str] = []

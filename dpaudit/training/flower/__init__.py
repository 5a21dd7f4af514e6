"""The seed methods (PrivateKT, FedKT, FREDY, ProxyFL) as Flower apps: ``dpaudit train METHOD --engine flower``.

:func:`run_method` runs a method's own code with its parties' work in Flower ClientApps and its curator's work in a
Flower ServerApp, on Flower's simulation engine or a local deployment (SuperLink and SuperNode processes), and
writes the same release bundle as the in-process runner (:mod:`.runner`; the apps in :mod:`.apps` and
:mod:`.deploy`, the message encoding in :mod:`.codec`). Needs the ``flower`` extra
(``pip install 'dpaudit[flower]'``). Importing this package imports no Flower module.
"""

from __future__ import annotations

from dpaudit.training.flower.runner import ENGINES, FlowerJob, flower_methods, run_method, run_methods

__all__ = ["ENGINES", "FlowerJob", "flower_methods", "run_method", "run_methods"]

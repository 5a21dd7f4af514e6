"""Training layer: offline data, partitions, the papers' models, the ensemble trainer, the four
federated knowledge-transfer methods, and release bundles."""

# The submodules are the API (``dpaudit.training.data``, ``.partition``, ``.models``, ``.ensemble``, ``.dpsgd``,
# ``.optim``, ``.engine``, ``.methods``, ``.release``, ``.external`` -- models trained elsewhere); importing the
# package loads none of them, so that ``import dpaudit.training.methods`` (the registry) stays free of torch.
__all__ = ["data", "partition", "models", "ensemble", "dpsgd", "optim", "engine", "methods", "release", "external"]

"""Training layer: offline data, partitions, the papers' models, the ensemble trainer, the four
federated knowledge-transfer methods, and release bundles."""

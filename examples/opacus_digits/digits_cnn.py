"""The model of the Opacus example: a small CNN for 8x8 digits (Opacus-compatible layers only).

``dpaudit release make --factory examples/opacus_digits/digits_cnn.py:build`` imports this file and calls
``build()`` to rebuild the module the weights belong to.
"""

import torch


def build(channels: int = 16) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, channels, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),       # 8x8 -> 4x4
        torch.nn.Conv2d(channels, 2 * channels, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),  # -> 2x2
        torch.nn.Flatten(), torch.nn.Linear(2 * channels * 4, 10),
    )

"""Small models for the PyTorch tests, loaded by path as ``tests/torch_models.py:NAME`` sources.

Benchmark workers import this file by path too, so it must import nothing from the tests.
"""

import time

import torch
import torch.fx
from torch import nn


class SmallCNN(nn.Module):
    """conv 3->4 (3x3, pad 1), ReLU, 2x2 max-pool, flatten, linear 64->10: FLOPs worked out by hand in the tests."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.relu(self.conv1(x))), 1))


class Branchy(nn.Module):
    """Two parallel branches, an in-place residual add and BatchNorm: exercises cuts, clones and buffers."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.left = nn.Conv2d(8, 8, 3, padding=1)
        self.right = nn.Conv2d(8, 8, 1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        y = self.relu(self.bn(self.stem(x)))
        a = self.left(y)
        a += self.right(y)
        return self.fc(torch.flatten(self.pool(a), 1))


class Nested(nn.Module):
    """Modules two levels deep, for the module -> device map."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 6))
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        return self.head(self.features(x))


class Shared(nn.Module):
    """One Linear called twice: its two calls cannot be on different devices."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(torch.relu(self.lin(x)))


class ShapeBranch(nn.Module):
    """Branches on the input's shape: torch.fx cannot trace it, torch.export can."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        if x.shape[1] == 3:
            x = self.c(x)
        x = torch.relu(self.bn(x))
        return self.fc(x.mean((2, 3)))


class PooledShapeBranch(nn.Module):
    """ShapeBranch with its BatchNorm after a global pool (1x1): torch.export refuses a batch of 1."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 8, 3)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        if x.shape[1] == 3:
            x = self.c(x)
        return self.fc(torch.flatten(torch.relu(self.bn(self.pool(x))), 1))


class DataBranch(nn.Module):
    """Branches on a tensor's value: neither tracer can follow it."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        if x.sum() > 0:
            return self.lin(x)
        return x


def _hog(x):
    """Asks for petabytes on a real batch larger than 2 (not while tracing or in the dry run)."""
    if type(x) is torch.Tensor and x.shape[0] > 2:
        torch.ones(x.shape[0], 2 ** 48)
    return x


torch.fx.wrap("_hog")


class Hog(nn.Module):
    """Fine at the traced batch of 2; out of memory at a larger batch."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return _hog(self.lin(x))


def _slow(x):
    """Sleeps for a minute on a real batch larger than 2 (not while tracing or in the dry run)."""
    if type(x) is torch.Tensor and x.shape[0] > 2:
        time.sleep(60)
    return x


torch.fx.wrap("_slow")


class Sleepy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(_slow(x))


def build_small(width: int = 4) -> nn.Module:
    """A factory with an argument."""
    return nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 2))


def not_a_module():
    return 42


class Broken(nn.Module):
    def __init__(self):
        super().__init__()
        raise ValueError("no weights for you")


instance = nn.Sequential(nn.Linear(3, 3))

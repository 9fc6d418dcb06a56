"""What every runner trains on, so that their numbers compare: the fixed random batch and the loss
(cross-entropy on fixed random labels for ``[N, C]`` outputs, mean square otherwise), whole or in the
shares of a batch split over ranks."""

from __future__ import annotations

import torch
from torch.utils._pytree import tree_leaves


def make_input(input_shape, batch_size: int, seed: int, gm=None) -> torch.Tensor:
    """The fixed random batch (on the CPU; runners move it): token ids for a model (``gm``) that embeds its
    input, standard normal values otherwise."""
    from .fx_import import example_input
    g = torch.Generator().manual_seed(seed)
    return example_input(gm, (batch_size, *input_shape[1:]), g)


class Loss:
    """Cross-entropy on fixed random labels for [N, C] float outputs, mean square otherwise."""

    def __init__(self, seed: int):
        self.seed = seed
        self._labels: dict[tuple, torch.Tensor] = {}

    def __call__(self, out, rows: tuple[int, int, int] | None = None) -> torch.Tensor:
        """The loss of ``out``; with ``rows`` = (lo, hi, batch) ``out`` holds samples lo:hi of the batch and
        the result is their share of the whole batch's mean loss (the shares of all shards add up to it)."""
        total = None
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor) or not t.is_floating_point():
                continue
            lo, hi, n = rows if rows is not None else (0, t.shape[0], t.shape[0])
            if t.dim() == 2:
                key = ((n, t.shape[1]), str(t.device))
                if key not in self._labels:
                    g = torch.Generator().manual_seed(self.seed + 1)
                    self._labels[key] = torch.randint(t.shape[1], (n,), generator=g).to(t.device)
                term = torch.nn.functional.cross_entropy(t, self._labels[key][lo:hi])
            else:
                term = t.float().pow(2).mean()
            if rows is not None:
                term = term * ((hi - lo) / n)
            total = term if total is None else total + term.to(total.device)
        if total is None:
            raise RuntimeError("the model returns no floating-point tensor to train on")
        return total

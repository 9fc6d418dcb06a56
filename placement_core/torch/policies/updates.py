"""One gradient step, as every learned placer takes it (and torch on one thread while a policy runs)."""

from __future__ import annotations

import torch

MAX_GRAD_NORM = 10.0


def apply_gradient(net: torch.nn.Module, opt: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    """Backpropagate ``loss``, clip the gradient's norm (one unlucky batch cannot wreck a policy), step."""
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), MAX_GRAD_NORM)
    opt.step()


class one_thread:
    """torch on one thread inside the block: the same result for a seed, and fair to a shared machine."""

    def __enter__(self):
        self.before = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc):
        torch.set_num_threads(self.before)
        return False

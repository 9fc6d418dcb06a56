"""Placeto's greedy placement in numpy: the dashboard's one click, without torch's per-call overhead.

The same network as ``placement_core.torch.policies.placeto_net.PlacetoNet`` (the
forward pass below mirrors it layer by layer, and a test compares their logits),
evaluated with numpy on one state at a time: a greedy pass over 300 nodes is some
twenty small matrix products per node, where torch spends most of its time
dispatching. The top-down and bottom-up halves run as one product with
block-diagonal weights, and a neighbour sum is one gather and one ``reduceat``.
Training still uses torch (it needs gradients and batches many states); applying
a trained Placeto policy needs only its file.
"""

from __future__ import annotations

import numpy as np

from .features import DEVICE_FEATURES, GraphInfo, device_context, node_features

_CURRENT = DEVICE_FEATURES.index("is_current")


def _block(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.zeros((a.shape[0] + b.shape[0], a.shape[1] + b.shape[1]), dtype=a.dtype)
    out[:a.shape[0], :a.shape[1]] = a
    out[a.shape[0]:, a.shape[1]:] = b
    return out


class NeighbourSum:
    """out[v] = Σ over edges (u -> v) of h[u] for h [n, k]: one gather and one ``np.add.reduceat``."""

    def __init__(self, frm: np.ndarray, to: np.ndarray):
        order = np.argsort(to, kind="stable")
        self.frm = np.asarray(frm, dtype=np.int64)[order]
        self.nodes, self.starts = np.unique(np.asarray(to)[order], return_index=True)

    def __call__(self, h: np.ndarray) -> np.ndarray:
        out = np.zeros_like(h)
        if len(self.frm):
            out[self.nodes] = np.add.reduceat(h[self.frm], self.starts, axis=0)
        return out


class FastPlaceto:
    """A Placeto policy's weights (its file's tensors) and its forward pass for one state, in numpy."""

    def __init__(self, tensors: dict, config: dict):
        w = {k: np.asarray(v, dtype=np.float32) for k, v in tensors.items()}
        self.rounds = int(config["rounds"])
        self.start = config.get("start", "fastest")
        self.h = w["embed.weight"].shape[0]
        self.embed = (w["embed.weight"].T, w["embed.bias"])
        # [down | up] side by side: one product per layer for both directions
        self.f = (_block(w["f_down.weight"].T, w["f_up.weight"].T), np.concatenate([w["f_down.bias"], w["f_up.bias"]]))
        self.g = (_block(w["g_down.weight"].T, w["g_up.weight"].T), np.concatenate([w["g_down.bias"], w["g_up.bias"]]))
        self.pool_l = [(w[f"pool_l.{i}.weight"].T, w[f"pool_l.{i}.bias"]) for i in range(3)]
        self.pool_h = [(w[f"pool_h.{i}.weight"].T, w[f"pool_h.{i}.bias"]) for i in range(3)]
        self.head = [(w[f"head.{i}.weight"].T, w[f"head.{i}.bias"]) for i in (0, 2, 4)]
        self.keep = float(w["keep"])

    def logits(self, x: np.ndarray, down: NeighbourSum, up: NeighbourSum, groups: np.ndarray, current: int,
               context: np.ndarray) -> np.ndarray:
        """Device logits [d] of one state: features [n, F], group masks [3, n], context [d, Fd]."""
        h = self.h
        h0 = np.maximum(x @ self.embed[0] + self.embed[1], 0.0)
        both = np.concatenate([h0, h0], axis=1)  # [down | up]
        base = both
        for _ in range(self.rounds):
            m = np.maximum(both @ self.f[0] + self.f[1], 0.0)
            summed = np.concatenate([down(m[:, :h]), up(m[:, h:])], axis=1)
            both = base + np.maximum(summed @ self.g[0] + self.g[1], 0.0)
        n = both.shape[0]
        pooled = [np.maximum((groups[i] @ np.maximum(both @ wl + bl, 0.0)) / n @ wh + bh, 0.0)
                  for i, ((wl, bl), (wh, bh)) in enumerate(zip(self.pool_l, self.pool_h))]
        z = np.concatenate([both[current]] + pooled)
        a = np.concatenate([np.broadcast_to(z, (context.shape[0], z.shape[0])), context], axis=1)
        for k, (w, b) in enumerate(self.head):
            a = a @ w + b
            if k < 2:
                a = np.maximum(a, 0.0)
        return a[:, 0] + self.keep * context[:, _CURRENT]

    def greedy(self, info: GraphInfo, order=None, fits=None) -> np.ndarray:
        """One greedy pass from the policy's start placement: the zero-shot placement. ``fits(placement)``, when
        given, masks a move after which the placement would overflow memory: the next most likely device is taken
        (keeping the node where it is always passes: the placement before the move fitted)."""
        src = np.array([int(u) for ps in info.parents for u in ps], dtype=np.int64)
        dst = np.array([v for v, ps in enumerate(info.parents) for _ in ps], dtype=np.int64)
        down, up = NeighbourSum(src, dst), NeighbourSum(dst, src)
        groups = np.stack([info.ancestors, info.descendants, info.parallel], axis=1).astype(np.float32)
        placement = info.start_placement(1)
        visited = np.zeros((1, info.n), dtype=np.float32)
        for v in (range(info.n) if order is None else order):
            v = int(v)
            x = node_features(info, placement, visited, v)[0]
            ctx = device_context(info, placement, v, visited)[0]
            logits = self.logits(x, down, up, groups[v], v, ctx)
            choice = int(np.argmax(logits))
            if fits is not None and choice != placement[0, v]:
                for choice in np.argsort(-logits, kind="stable").tolist():  # most likely first
                    trial = placement[0].copy()
                    trial[v] = choice
                    if choice == placement[0, v] or fits(trial):
                        break
            placement[0, v] = choice
            visited[0, v] = 1.0
        return placement[0].copy()

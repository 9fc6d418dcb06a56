"""Ops of a generated network, costed from their shapes with docs/design.md §4's formulas.

FLOPs are for the whole batch (a multiply-add is 2 FLOPs); tensors are float32 unless a builder is given
another element size (the GPT's bf16).
A fully connected layer costs 2·in·out·rows forward, a convolution
2·kh·kw·(cin/groups)·cout·Hout·Wout·N, pooling kh·kw·C·Hout·Wout·N, and the
backward of each is twice its forward (input and weight gradients); element-wise
ops, normalisation and softmax are memory-bound: their FLOPs are one per output
element and their traffic (bytes read + written) decides their time.

Weights shared by the steps of an unrolled recurrent layer live in one
*weights* op (its parameters, read by every step through an edge of the
weights' size), as in a TensorFlow graph, so they are counted once for memory
and cross a device boundary once per device.
"""

from __future__ import annotations

from ..model.graph import BYTES_PER_FLOAT, Graph, Op

F = BYTES_PER_FLOAT


class NetBuilder:
    """Collects ops in definition order; every method returns the new op's name."""

    def __init__(self, name: str, batch: int, elem_bytes: float = F, precision: str = "fp32"):
        self.name = name
        self.batch = int(batch)
        self.elem_bytes = float(elem_bytes)
        self.precision = precision
        self.ops: list[Op] = []
        self._bytes: dict[str, float] = {}

    def graph(self) -> Graph:
        return Graph(self.name, self.ops, self.batch, precision=self.precision)

    def out_bytes(self, name: str) -> float:
        return self._bytes[name]

    def _add(self, name: str, kind: str, inputs, *, fwd: float, bwd: float, out_elems: float, params: float = 0.0,
             read_bytes: float | None = None, shape=(), edges: dict | None = None, groups: int = 1) -> str:
        inputs = tuple(inputs)
        F = self.elem_bytes
        out = float(out_elems) * F
        read = sum((edges or {}).get(i, self._bytes[i]) for i in inputs) if read_bytes is None else read_bytes
        self.ops.append(Op(name=name, kind=kind, inputs=inputs, fwd_flops=float(fwd), bwd_flops=float(bwd),
                           output_bytes=out, param_bytes=float(params) * F, mem_bytes=read + out + float(params) * F,
                           shape=tuple(int(s) for s in shape), input_bytes=dict(edges or {}), groups=int(groups)))
        self._bytes[name] = out
        return name

    def input(self, name: str, shape) -> str:
        elems = 1
        for s in shape:
            elems *= int(s)
        return self._add(name, "input", (), fwd=0, bwd=0, out_elems=elems, read_bytes=0, shape=shape)

    def weights(self, name: str, elems: float) -> str:
        """Shared weights: parameters only; consumers name it with an edge of ``elems`` floats."""
        F = self.elem_bytes
        self.ops.append(Op(name=name, kind="other", fwd_flops=0.0, bwd_flops=0.0, output_bytes=0.0,
                           param_bytes=float(elems) * F, mem_bytes=0.0, shape=(int(elems),)))
        self._bytes[name] = float(elems) * F
        return name

    def embedding(self, name: str, tokens: str, vocab: int, dim: int, rows: int, shape) -> str:
        """A table lookup: memory-bound, the gradient is a scatter of the same size."""
        elems = rows * dim
        return self._add(name, "embedding", (tokens,), fwd=elems, bwd=2 * elems, out_elems=elems,
                         params=vocab * dim, read_bytes=self._bytes[tokens] + elems * self.elem_bytes, shape=shape)

    def linear(self, name: str, inputs, n_in: int, n_out: int, rows: int, shape, *, weights: str | None = None,
               edges: dict | None = None, kind: str = "linear", extra_elems: float = 0.0) -> str:
        """x·W (+ b) for ``rows`` rows. With ``weights`` the parameters are that op's (shared), else its own.
        ``extra_elems`` are further activations kept for the backward pass (an LSTM cell's gates)."""
        fwd = 2.0 * n_in * n_out * rows
        inputs = list(inputs)
        edges = dict(edges or {})
        params = 0.0
        if weights is not None:
            inputs.append(weights)
            edges[weights] = self._bytes[weights]
        else:
            params = n_in * n_out + n_out
        return self._add(name, kind, inputs, fwd=fwd, bwd=2 * fwd, out_elems=rows * n_out + extra_elems,
                         params=params, shape=shape, edges=edges or None)

    def elementwise(self, name: str, inputs, elems: float, shape, *, kind: str = "elementwise",
                    edges: dict | None = None) -> str:
        return self._add(name, kind, inputs, fwd=elems, bwd=elems, out_elems=elems, shape=shape, edges=edges)

    def conv(self, name: str, x: str, cin: int, cout: int, k: int, hw_out: int, *, groups: int = 1,
             first: bool = False) -> str:
        """A k×k convolution, square output of side ``hw_out``; the first layer needs no input gradient."""
        n = self.batch
        fwd = 2.0 * k * k * (cin // groups) * cout * hw_out * hw_out * n
        return self._add(name, "conv", (x,), fwd=fwd, bwd=fwd if first else 2 * fwd,
                         out_elems=n * cout * hw_out * hw_out, params=k * k * (cin // groups) * cout,
                         shape=(n, cout, hw_out, hw_out), groups=groups)

    def pool(self, name: str, x: str, c: int, k: int, hw_out: int) -> str:
        n = self.batch
        fwd = float(k * k * c * hw_out * hw_out * n)
        return self._add(name, "pool", (x,), fwd=fwd, bwd=fwd, out_elems=n * c * hw_out * hw_out,
                         shape=(n, c, hw_out, hw_out))

    def norm(self, name: str, x: str, c: int, hw: int) -> str:
        elems = self.batch * c * hw * hw
        return self._add(name, "norm", (x,), fwd=elems, bwd=2 * elems, out_elems=elems, params=2 * c,
                         shape=(self.batch, c, hw, hw))

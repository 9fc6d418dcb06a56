"""What training keeps per parameter besides the weights: gradients and the optimizer's state, and what
the weight update reads and writes; partitioned over a data-parallel group by ZeRO.

Per parameter, in bytes (Rajbhandari et al., *ZeRO: Memory optimizations toward training trillion parameter
models*, SC'20, §3.1): plain SGD keeps the weights and their gradients; Adam adds its two moments, and in
mixed precision (bf16 or fp16 weights and gradients) an fp32 copy of the weights as well: 2 + 2 + 12 bytes a
parameter, the paper's K = 12. ZeRO partitions across the N replicas of a data-parallel group the optimizer
state (stage 1), the gradients too (stage 2) and the weights too (stage 3); each replica updates only its
own part, so the update's traffic divides by N from stage 1 on. Stage 3 gathers the weights before each
layer's forward and backward: only ``placement plan`` models those gathers (ops of a ``gpt:`` network's graph,
families/gpt_parallel.py), so the general profiles refuse stage 3 (:func:`check`) and
:func:`resident_copies` divides the weights too only for the planner's profile.

The update reads and writes every byte of state it touches once (a memory-bound kernel): SGD reads the
weights and gradients and writes the weights (3 copies of the weights' bytes, the project's update
formula); Adam in fp32 reads weights, gradients and both moments and writes weights and moments (28 bytes a
parameter); mixed-precision Adam reads the gradient and the fp32 weights and moments and writes those and the
low-precision weights (24 + 2e bytes, e the low precision's element size).
"""

from __future__ import annotations

from ..base.errors import InputError
from ..model.graph import PRECISION_BYTES

OPTIMIZERS = ("sgd", "adam")
ZERO_STAGES = (0, 1, 2)


def check(optimizer: str, zero: int) -> None:
    if optimizer not in OPTIMIZERS:
        raise InputError(f"unknown optimizer {str(optimizer)[:20]!r}", field="optimizer",
                         fix="Use " + " or ".join(OPTIMIZERS))
    if zero == 3:
        raise InputError("ZeRO stage 3 gathers the weights before every layer, which the simulator does not run "
                         "yet", field="zero", fix="Use --zero 0, 1 or 2")
    if isinstance(zero, bool) or zero not in ZERO_STAGES:
        raise InputError(f"ZeRO stage must be 0, 1 or 2, got {str(zero)[:20]}", field="zero", fix="Use 0, 1 or 2")


def state_parts(optimizer: str, precision: str) -> tuple[float, float, float]:
    """(weights, gradients, optimizer state) per byte of weights at ``precision``."""
    e = PRECISION_BYTES[precision]
    if optimizer == "sgd":
        return 1.0, 1.0, 0.0
    return 1.0, 1.0, (12.0 if e < 4 else 8.0) / e  # fp32 copy + two moments, or two moments


def resident_copies(optimizer: str, precision: str, zero: int = 0, group: int = 1) -> float:
    """Bytes resident per byte of a layer's weights on one of ``group`` data-parallel replicas."""
    weights, grads, state = state_parts(optimizer, precision)
    return (weights / (group if zero >= 3 else 1) + grads / (group if zero >= 2 else 1)
            + state / (group if zero >= 1 else 1))


def update_copies(optimizer: str, precision: str, zero: int = 0, group: int = 1) -> float:
    """Bytes the weight update reads and writes per byte of weights, on one of ``group`` replicas."""
    e = PRECISION_BYTES[precision]
    if optimizer == "sgd":
        whole = 3.0
    elif e < 4:
        whole = (24.0 + 2.0 * e) / e
    else:
        whole = 28.0 / e
    return whole / (group if zero >= 1 else 1)

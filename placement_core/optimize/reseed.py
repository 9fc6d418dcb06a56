"""``np.random.default_rng([seed, batch])`` without building a generator per batch.

An asynchronous batch's children are made with a generator seeded by (run seed, batch number), so any process
makes the same bytes (:mod:`.variation`). Building one costs numpy 30-45 µs (most of it
``SeedSequence.generate_state``), a tenth of what ResNet-50's driver does per batch outside the simulator. The
batch helper works out the same PCG64 state from the seed words (numpy's ``SeedSequence`` hash, then PCG's
seeding) and it is set on one generator per thread; the tests compare it with numpy's for many seeds. Without
the helper, or for anything but non-negative integers below 2^32, numpy builds the generator itself.
"""

from __future__ import annotations

import threading

import numpy as np

from .operators import _batch

_M32 = 0xFFFFFFFF
_local = threading.local()


def seeded(entropy) -> np.random.Generator:
    """A generator in the state of ``np.random.default_rng(entropy)`` (``entropy``: a sequence of integers).
    The same object may be returned again on this thread: use it before asking for the next."""
    words = tuple(entropy)
    if _batch is None or not all(type(w) is int and 0 <= w <= _M32 for w in words):
        return np.random.default_rng(list(words))
    parts = _batch.pcg64_seed(words)
    if parts is None:  # a compiler without 128-bit integers
        return np.random.default_rng(list(words))
    rng = getattr(_local, "rng", None)
    if rng is None:
        rng = _local.rng = np.random.Generator(np.random.PCG64(0))
    rng.bit_generator.state = {"bit_generator": "PCG64", "state": {"state": parts[0] << 64 | parts[1],
                                                                   "inc": parts[2] << 64 | parts[3]},
                               "has_uint32": 0, "uinteger": 0}
    return rng

"""Give a Dask worker the C heap that a plain process has.

A Dask nanny starts its worker with ``MALLOC_TRIM_THRESHOLD_=65536`` (so that freed memory goes
back to the OS and the worker's memory reading stays honest). Setting any of glibc's malloc
parameters also freezes its mmap threshold at 128 kB, so every array over 128 kB the simulator
allocates per evaluation becomes an mmap, a munmap and fresh page faults. On a 10,000-op graph
that made each evaluation 19 % slower on a worker than in a plain process (3.88 against
4.62 ms, measured with and without the variable). Raising both thresholds brings the plain
process's speed back; a worker then keeps at most a few dozen MB of freed heap.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's own ceiling for its dynamic threshold on 64-bit
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # what glibc sets when it raises the mmap threshold itself

_done = False


def restore_malloc_thresholds() -> bool:
    """Raise glibc's mmap and trim thresholds once per process, where a nanny lowered them.

    Returns True when the thresholds were set (glibc, with ``MALLOC_TRIM_THRESHOLD_`` in the
    environment); elsewhere (another libc, a process started without the variable) it does nothing.
    """
    global _done
    if _done or "MALLOC_TRIM_THRESHOLD_" not in os.environ:
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): its allocator has no such switch
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    _done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _done

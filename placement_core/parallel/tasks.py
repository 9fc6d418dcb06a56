"""Whole tasks (independent optimization runs, experiment jobs) spread over processes or a Dask cluster.

A run of 20,000 evaluations is seconds of work, so here per-task overhead does not matter and
the plain tools serve: a ``concurrent.futures`` pool of local processes, or Dask futures. A
function and its items must pickle (module-level functions, dataclasses of plain data and
problems). A task whose worker dies is run again from its start by Dask; with local processes
the pool breaks and the error says so.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, Callable, Iterable, Iterator

from .cluster import connect
from .heap import restore_malloc_thresholds
from .pool import _context


def map_unordered(fn: Callable[[Any], Any], items: Iterable[Any], *, workers: int = 1, dask=None
                  ) -> Iterator[tuple[int, Any]]:
    """``(index, fn(item))`` for every item, as each finishes: in this process (``workers`` 1), on
    ``workers`` local processes, or on a Dask cluster (an address or a Client)."""
    items = list(items)
    if dask is not None and dask != "":
        yield from _on_dask(fn, items, dask)
    elif workers > 1 and len(items) > 1:
        with concurrent.futures.ProcessPoolExecutor(min(workers, len(items)), mp_context=_context(None)) as pool:
            futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
            try:
                for future in concurrent.futures.as_completed(futures):
                    yield futures[future], future.result()
            finally:
                for future in futures:
                    future.cancel()
    else:
        for i, item in enumerate(items):
            yield i, fn(item)


def _on_dask(fn, items, address) -> Iterator[tuple[int, Any]]:
    from distributed import as_completed

    client, owned = connect(address)
    try:
        futures = {client.submit(_whole_task, fn, item, pure=False): i for i, item in enumerate(items)}
        try:
            for future in as_completed(futures):
                yield futures[future], future.result()
        finally:
            client.cancel(list(futures))
    finally:
        if owned:
            client.close()


def _whole_task(fn, item):
    restore_malloc_thresholds()  # a Dask worker's heap as a plain process's (parallel/heap.py)
    return fn(item)

"""What travels between the driver and its workers: placements as compact arrays, objectives back.

A placement is a device index per op; with at most 256 devices one byte holds it, so a
task of 1,000 ResNet-50 placements is 176 kB instead of 704 kB of int32 (or megabytes of
pickled lists). Frames are a fixed header plus the raw array bytes: no pickle per task. A
recipe (parents to make children from, :mod:`placement_core.optimize.variation`) is pickled
with its parents in the same compact form, and its reply carries the children back.
"""

from __future__ import annotations

import pickle
import struct

import numpy as np

_DTYPES = (np.uint8, np.uint16, np.int32)
RECIPE = 9  # the dtype code of a frame that carries a pickled recipe instead of placements
# task id, rows, columns, dtype code
TASK = struct.Struct("<qiib")
# task id, status (0: objectives follow, 1: an error message follows)
REPLY = struct.Struct("<qb")


def compact(placements: np.ndarray, n_devices: int) -> np.ndarray:
    """The smallest unsigned type that holds every device index (int32 beyond 65,536 devices)."""
    if n_devices <= 256:
        return placements.astype(np.uint8)
    if n_devices <= 65536:
        return placements.astype(np.uint16)
    return np.ascontiguousarray(placements, dtype=np.int32)


def expand(packed: np.ndarray) -> np.ndarray:
    """Back to the simulator's contiguous int32 placements."""
    return np.ascontiguousarray(packed, dtype=np.int32)


def task_frame(task_id: int, packed: np.ndarray) -> bytes:
    code = _DTYPES.index(packed.dtype.type)
    rows, cols = packed.shape
    return TASK.pack(task_id, rows, cols, code) + packed.tobytes()


def read_task(frame: bytes):
    """(task id, placements) or, for a recipe frame, (task id, the recipe)."""
    task_id, rows, cols, code = TASK.unpack_from(frame)
    if code == RECIPE:
        return task_id, pickle.loads(frame[TASK.size:])
    packed = np.frombuffer(frame, dtype=_DTYPES[code], offset=TASK.size, count=rows * cols).reshape(rows, cols)
    return task_id, expand(packed)


def compact_recipe(recipe, n_devices: int):
    """The recipe with its parents compact, as it travels."""
    from dataclasses import replace
    return replace(recipe, a=compact(recipe.a, n_devices), b=None if recipe.b is None else compact(recipe.b, n_devices))


def recipe_frame(task_id: int, recipe) -> bytes:
    small = compact_recipe(recipe, recipe.n_devices)
    return TASK.pack(task_id, 0, 0, RECIPE) + pickle.dumps(small, protocol=pickle.HIGHEST_PROTOCOL)


def made_frame(task_id: int, kids: np.ndarray, objectives: np.ndarray, rates, n_devices: int) -> bytes:
    """The reply to a recipe: the children made, their objectives and mutation rates."""
    return REPLY.pack(task_id, 2) + pickle.dumps((compact(kids, n_devices), objectives, rates),
                                                 protocol=pickle.HIGHEST_PROTOCOL)


def reply_frame(task_id: int, objectives: np.ndarray) -> bytes:
    return REPLY.pack(task_id, 0) + np.ascontiguousarray(objectives, dtype=np.float64).tobytes()


def error_frame(task_id: int, message: str) -> bytes:
    return REPLY.pack(task_id, 1) + message.encode("utf-8", "replace")


def read_reply(frame: bytes):
    """(task id, objectives or (children, objectives, rates), None), or (task id, None, the worker's error)."""
    task_id, status = REPLY.unpack_from(frame)
    if status == 1:
        return task_id, None, frame[REPLY.size:].decode("utf-8", "replace")
    if status == 2:
        kids, objectives, rates = pickle.loads(frame[REPLY.size:])
        return task_id, (expand(kids), objectives, rates), None
    return task_id, np.frombuffer(frame, dtype=np.float64, offset=REPLY.size).copy(), None


def evaluate_packed(problem, packed) -> np.ndarray:
    """On a worker: the objectives of compact placements (none: an empty round trip, a ping)."""
    return problem.evaluate_many(expand(packed)) if packed is not None and len(packed) else np.zeros(0)


def make_packed(problem, recipe) -> tuple:
    """On a worker: a batch's children made and evaluated, the children compact (children, objectives, rates)."""
    kids, out, rates = recipe.make_and_evaluate(problem)  # the work travels with the task (optimize.variation)
    return compact(kids, problem.n_genes), out, rates

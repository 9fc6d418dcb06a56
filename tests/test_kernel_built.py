"""The compiled kernel is built and importable, and its arguments are checked by name.

Without the kernel ``Problem`` falls back to the Python reference, and every test that compares the kernel
with the reference (tests/test_simulator_properties.py and the others that use ``helpers.kernel_and_reference``)
would compare the reference with itself and pass. So this test fails when the kernel cannot be imported. To run
the suite without a C compiler on purpose, set ``PLACEMENT_ALLOW_NO_KERNEL=1``: this test and the kernel =
reference comparisons are then skipped instead (README, "Testing").
"""

import os

import numpy as np
import pytest
from helpers import ALLOW_NO_KERNEL, devices, op, problem

from placement_core import Problem, load_devices, load_network
from placement_core.simulate import kernel_available


def test_the_compiled_kernel_is_built_and_importable():
    if os.environ.get(ALLOW_NO_KERNEL) == "1":
        pytest.skip(f"{ALLOW_NO_KERNEL}=1: running without the compiled kernel on purpose")
    try:
        from placement_core.simulate import _kernel  # noqa: F401
    except ImportError as e:
        pytest.fail(f"the compiled simulator kernel is not importable ({e}); rebuild it with "
                    "`.venv/bin/pip install --no-deps --no-build-isolation -e .` (needs a C compiler), or set "
                    f"{ALLOW_NO_KERNEL}=1 to run without it on purpose")
    assert kernel_available()
    p = Problem(load_network("alexnet"), load_devices("malvik-4gpu"))
    assert p.simulator.fast  # problems evaluate through it


def _kernel():
    if not kernel_available():
        pytest.skip("the compiled kernel is not built")
    from placement_core.simulate import _kernel
    return _kernel


def _arguments(p: Problem) -> dict:
    """The keyword arguments Simulator passes for a small problem (read back through a spy)."""
    seen = {}
    kernel = _kernel()

    class Spy:
        def __init__(self, **kw):
            seen.update(kw)

    real = kernel.Kernel
    kernel.Kernel = Spy
    try:
        Problem(p.graph, p.devices, profile=p.profile, settings=p.settings)
    finally:
        kernel.Kernel = real
    return seen


@pytest.fixture(scope="module")
def small():
    return problem([op("a"), op("b", ["a"]), op("c", ["b"])], devices(2))


def test_the_python_call_site_passes_what_the_kernel_takes(small):
    args = _arguments(small)
    k = _kernel().Kernel(**args)
    out = np.empty(2 + 2 * 2 + 2 * 1)
    k.run(np.array([0, 1, 1], dtype=np.int32), out)
    assert out[0] == small.simulate([0, 1, 1], trace=True).result.makespan


def test_an_unknown_argument_is_named(small):
    with pytest.raises(TypeError, match="unexpected keyword argument 'batchez'"):
        _kernel().Kernel(**_arguments(small), batchez=2)


@pytest.mark.parametrize("name", ["n_ops", "units", "fwd", "msg_overhead"])
def test_a_missing_argument_is_named(small, name):
    args = _arguments(small)
    del args[name]
    with pytest.raises(TypeError, match=f"missing required argument '{name}'"):
        _kernel().Kernel(**args)


def test_a_required_array_may_not_be_none(small):
    with pytest.raises(TypeError, match="missing required argument 'route'"):
        _kernel().Kernel(**{**_arguments(small), "route": None})


def test_arguments_are_keywords_only(small):
    with pytest.raises(TypeError, match="keyword arguments only"):
        _kernel().Kernel(3, **_arguments(small))


def test_a_wrong_type_or_a_short_array_is_named(small):
    args = _arguments(small)
    with pytest.raises(TypeError, match="out_bytes: expected a contiguous array of 'd' items"):
        _kernel().Kernel(**{**args, "out_bytes": np.zeros(3, dtype=np.int32)})
    with pytest.raises(ValueError, match="fwd: expected at least 6 items, got 2"):
        _kernel().Kernel(**{**args, "fwd": np.zeros(2)})
    with pytest.raises(TypeError, match="n_dev must be an int"):
        _kernel().Kernel(**{**args, "n_dev": 2.5})


def test_a_groups_arrays_are_needed_with_it_and_refused_without_it(small):
    args = _arguments(small)
    with pytest.raises(TypeError, match="split_dim is given without n_splits > 0"):
        _kernel().Kernel(**args, split_dim=np.zeros(1, dtype=np.int32))
    with pytest.raises(TypeError, match=r"missing required argument 'split_dim' \(n_splits > 0 needs it\)"):
        _kernel().Kernel(**args, n_splits=1)
    with pytest.raises(TypeError, match=r"missing required argument 'curve_bytes' \(curve_ptr needs it\)"):
        _kernel().Kernel(**args, curve_ptr=np.zeros(2, dtype=np.int32))


def test_the_shared_resource_arrays_go_together_and_are_checked(small):
    """shared_* (docs/formats.md "shared"): all four or none; offsets, device indices, demands and capacities
    in range."""
    args = _arguments(small)
    i32 = lambda *x: np.array(x, dtype=np.int32)  # noqa: E731
    f64 = lambda *x: np.array(x, dtype=float)  # noqa: E731
    good = {"shared_ptr": i32(0, 2), "shared_dev": i32(0, 1), "shared_demand": f64(1, 1), "shared_cap": f64(1)}
    _kernel().Kernel(**args, **good)
    with pytest.raises(ValueError, match="go together"):
        _kernel().Kernel(**args, shared_ptr=good["shared_ptr"])
    for key, bad, words in (("shared_dev", i32(0, 5), "out of range"), ("shared_demand", f64(1, 0), "demand <= 0"),
                            ("shared_cap", f64(0), "capacity <= 0"), ("shared_ptr", i32(0, 3), "bad offsets")):
        with pytest.raises(ValueError, match=words):
            _kernel().Kernel(**{**args, **good, key: bad})
    with pytest.raises(ValueError, match="go together"):
        _kernel().Kernel(**args, allreduce_alone=f64(1))

"""Builds the compiled simulator kernel and the optimizers' batch helper; everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "placement_core.simulate._kernel",
            ["placement_core/simulate/_kernel.c"],
            extra_compile_args=["-O2", "-std=c99"],
            optional=True,  # without a compiler the pure-Python simulator is used
        ),
        Extension(
            "placement_core.optimize._batch",
            ["placement_core/optimize/_batch.c"],
            extra_compile_args=["-O2", "-std=c99"],
            optional=True,  # without a compiler the numpy operators do the same work
        ),
    ]
)

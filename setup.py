"""Builds the compiled simulator kernel; everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "placement_core.simulate._kernel",
            ["placement_core/simulate/_kernel.c"],
            extra_compile_args=["-O2", "-std=c99"],
            optional=True,  # without a compiler the pure-Python simulator is used
        )
    ]
)

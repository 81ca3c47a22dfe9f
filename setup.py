"""The one compiled module, ``jaxdiag.trace._xline`` (the trace reader's line decoder); everything else is in
pyproject.toml. It is optional: where it cannot be built, jaxdiag reads traces with jaxlib's reader instead."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("jaxdiag.trace._xline", ["jaxdiag/trace/_xline.c"], optional=True)])

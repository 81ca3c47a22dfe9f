"""jaxdiag's version, in the foundation layer: saved baselines record it, and the package re-exports it.

``pyproject.toml`` reads it from here (``[tool.setuptools.dynamic]``), so it is written once.
"""

__version__ = "0.1.0"

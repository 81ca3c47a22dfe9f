"""Tests of the renderers.

``FIGURES``: every figure of the report, in the order the registry of sections gives.
"""

FIGURES = (
    "step_breakdown",
    "step_timeline",
    "recompile_timeline",
    "host_wait_waterfall",
    "throughput",
    "small_op_histogram",
    "collective_overlap",
    "sharding_collectives",
    "sharding_layouts",
    "roofline",
)

"""What a GPU's dense bf16 tensor cores can do, by device-name fragment: one table for the trace and MFU.

A GPU trace names its device (``NVIDIA H100 80GB HBM3``) and, on most setups, its SM count
and clock, but not its peak. Each row gives the dense bf16 FLOPs per SM per clock (with the
trace's SMs and clock: the peak of this very part, clocked as traced) and the datasheet's dense
bf16 peak (used when the trace lacks SMs or clock). The first fragment found in the name wins,
so a fragment comes before the shorter ones it contains (``H100 PCIE`` before ``H100``,
``A100`` before ``A10``, ``L40`` before ``L4``).

Checked against datasheet peaks: H100 SXM 132 SMs x 1.83 GHz x 4096 = 989 TFLOP/s;
A100 108 x 1.41 GHz x 2048 = 312; V100 80 x 1.53 GHz x 1024 = 125; L4 58 x 2.04 GHz x 1024 = 121.
"""

from __future__ import annotations

#: ``(name fragment, dense bf16 FLOPs per SM per clock, datasheet dense bf16 FLOP/s)``; ``None``: not known.
GPUS: tuple[tuple[str, int | None, float | None], ...] = (
    ("H100 PCIE", 4096, 756e12),
    ("H100 NVL", 4096, 835e12),
    ("H100", 4096, 989e12),
    ("H200", 4096, 989e12),  # also GH200
    ("H800", 4096, None),
    ("B200", 8192, 2250e12),  # also GB200
    ("B100", 8192, None),
    ("A100", 2048, 312e12),
    ("A800", 2048, None),
    ("A30", 2048, None),
    ("L40S", 1024, 362e12),
    ("L40", 1024, None),
    ("L4", 1024, 121e12),
    ("A10", 1024, None),
    ("A40", 1024, None),
    ("RTX", 1024, None),
    ("V100", 1024, 125e12),
    ("MI300X", None, 1307e12),
)


def gpu_spec(name: str) -> tuple[int | None, float | None]:
    """``(FLOPs per SM per clock, datasheet peak)`` of the GPU ``name`` (``(None, None)``: not in the table)."""
    upper = name.upper()
    return next(((per_sm, peak) for fragment, per_sm, peak in GPUS if fragment in upper), (None, None))

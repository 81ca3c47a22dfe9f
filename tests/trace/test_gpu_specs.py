"""One table of GPU peaks: the longer fragment wins over the shorter one it contains."""

from __future__ import annotations

import pytest

from jaxdiag.trace.gpu_specs import GPUS, gpu_spec


@pytest.mark.parametrize(
    ("name", "spec"),
    [
        ("NVIDIA H100 80GB HBM3", (4096, 989e12)),
        ("NVIDIA H100 PCIe", (4096, 756e12)),
        ("NVIDIA GH200 480GB", (4096, 989e12)),
        ("NVIDIA A100-SXM4-80GB", (2048, 312e12)),
        ("NVIDIA A10", (1024, None)),
        ("NVIDIA L40", (1024, None)),  # not the L4's datasheet peak
        ("NVIDIA L4", (1024, 121e12)),
        ("AMD Instinct MI300X", (None, 1307e12)),
        ("Host CPU", (None, None)),
    ],
)
def test_a_gpu_name_finds_its_own_row(name: str, spec: tuple) -> None:
    assert gpu_spec(name) == spec


def test_no_row_is_hidden_by_a_shorter_fragment_before_it() -> None:
    fragments = [f for f, _, _ in GPUS]
    for i, fragment in enumerate(fragments):
        assert not [f for f in fragments[:i] if f in fragment], fragment


def test_per_sm_figures_give_the_datasheet_peaks() -> None:
    # H100 SXM: 132 SMs at 1.83 GHz; A100: 108 at 1.41 GHz; V100: 80 at 1.53 GHz; L4: 58 at 2.04 GHz.
    for name, sms, ghz in (("H100", 132, 1.83), ("A100", 108, 1.41), ("V100", 80, 1.53), ("L4", 58, 2.04)):
        per_sm, peak = gpu_spec(name)
        assert per_sm * sms * ghz * 1e9 == pytest.approx(peak, rel=0.01)

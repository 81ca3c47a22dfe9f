"""``tools/trim_xspace.py``: fewer events and planes, everything else written back as it was."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from jaxlib import _profile_data

from xspace_builders import Ev, XSpaceBuilder, host_plane

_SPEC = importlib.util.spec_from_file_location("trim_xspace", Path(__file__).parents[2] / "tools" / "trim_xspace.py")
trim_xspace = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(trim_xspace)


def space() -> bytes:
    builder = XSpaceBuilder().plane("/device:TPU:0", {"device_type_string": "TPU v6 Lite"})
    builder.line(
        "XLA Ops", [Ev(f"%fusion.{i} = f32[8]{{0}} fusion()", 1_000 * i, 500, {"run_id": i}) for i in range(10)]
    )
    builder.line("XLA Modules", [Ev("jit_f(12190760917235803885)", 0, 10_000)])
    return host_plane(builder, steps=[(0, 0, 10_000)]).serialize()


def parsed(data: bytes) -> dict[str, dict[str, list[tuple[str, float, float, dict]]]]:
    return {
        p.name: {
            line.name: [(e.name, e.start_ns, e.duration_ns, dict(e.stats)) for e in line.events] for line in p.lines
        }
        for p in _profile_data.ProfileData.from_serialized_xspace(data).planes
    }


def test_trimming_keeps_the_first_events_of_each_line_exactly() -> None:
    data = space()
    whole, cut = parsed(data), parsed(trim_xspace.trim(data, events=3))
    assert cut["/device:TPU:0"]["XLA Ops"] == whole["/device:TPU:0"]["XLA Ops"][:3]
    assert cut["/device:TPU:0"]["XLA Modules"] == whole["/device:TPU:0"]["XLA Modules"]
    assert cut["/host:CPU"] == {line: events[:3] for line, events in whole["/host:CPU"].items()}


def test_dropping_planes_and_keeping_everything_round_trips() -> None:
    data = space()
    assert trim_xspace.trim(data, events=None) == data
    dropped = parsed(trim_xspace.trim(data, events=None, drop_planes=frozenset({"/host:metadata"})))
    assert list(dropped) == [name for name in parsed(data) if name != "/host:metadata"]


def test_command_line(tmp_path: Path, capsys) -> None:
    source, target = tmp_path / "in.xplane.pb", tmp_path / "out.xplane.pb"
    source.write_bytes(space())
    assert trim_xspace.main([str(source), str(target), "--events", "2", "--drop-plane", "/host:metadata"]) == 0
    assert len(parsed(target.read_bytes())["/device:TPU:0"]["XLA Ops"]) == 2
    assert "out.xplane.pb" in capsys.readouterr().out

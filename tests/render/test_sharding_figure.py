"""The sharding figure draws the report's collectives by origin, or says why it cannot."""

from __future__ import annotations

from jaxdiag.render.sharding_figure import sharding_collectives
from report_builders import make_report


def _timeline_row(**kw):
    row = {
        "module": "jit_bad_step",
        "op": "all-gather.1",
        "kind": "all-gather",
        "count": 4,
        "total_ms": 2.5,
        "function": "bad_step",
        "arrays": ["params['w']"],
        "mesh_axes": ["model"],
        "origin": "resharding",
        "bytes": 1 << 20,
    }
    row.update(kw)
    return row


def test_timeline_collectives_are_bars_by_origin():
    report = make_report()
    report = type(report)(
        **{
            **report.__dict__,
            "sharding": {
                "timeline": [
                    _timeline_row(),
                    _timeline_row(
                        op="all-reduce.3",
                        kind="all-reduce",
                        origin="reduction",
                        total_ms=1.0,
                        arrays=["grads"],
                        mesh_axes=["data"],
                    ),
                ]
            },
        }
    )
    fig = sharding_collectives(report)
    by_origin = {t.name: t for t in fig.data}
    assert set(by_origin) == {"resharding", "reduction"}
    assert list(by_origin["resharding"].x) == [2.5]
    assert by_origin["resharding"].y[0] == "bad_step: all-gather of params['w'] over model"


def test_compile_log_facts_without_timeline_use_bytes():
    report = make_report()
    report = type(report)(
        **{
            **report.__dict__,
            "sharding": {
                "functions": [
                    {
                        "function": "step",
                        "collectives": [
                            {
                                "kind": "all-reduce",
                                "bytes_per_call": 4096,
                                "origin": "reduction",
                                "arrays": ["g"],
                                "mesh_axes": ["data"],
                            }
                        ],
                    }
                ]
            },
        }
    )
    fig = sharding_collectives(report)
    assert fig.layout.xaxis.title.text == "bytes per call" and list(fig.data[0].x) == [4096.0]


def test_no_collectives_says_no_data():
    fig = sharding_collectives(make_report())
    assert len(fig.data) == 0
    assert any(a.text.startswith("no data: ") for a in fig.layout.annotations)

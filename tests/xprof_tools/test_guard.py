"""``Guard`` alone: which requests reach XProf's application (the real server is in ``test_server``)."""

from __future__ import annotations

from typing import Any

import pytest

from jaxdiag.xprof_tools.guard import Guard

PORT = 8765
RUN = "2026_11_26_07_42_36"


def _app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"served"]


def _ask(path: str, query: str = "", method: str = "GET", **headers: str) -> str:
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query, "HTTP_HOST": f"127.0.0.1:{PORT}"}
    environ.update({f"HTTP_{k.upper()}": v for k, v in headers.items()})
    environ = {k: v for k, v in environ.items() if v is not None}
    status: list[str] = []
    body = b"".join(Guard(_app, PORT, [RUN])(environ, lambda s, h: status.append(s)))
    return f"{status[0]} {body.decode()}"


@pytest.mark.parametrize(
    "path, query",
    [
        ("/", ""),
        ("/runs", ""),
        ("/trace_viewer_index.html", f"is_streaming=true&trace_data_url=%2Fdata%3Frun%3D{RUN}"),
        ("/data", f"run={RUN}&tag=trace_viewer@&host=vm&start_time_ms=1.000&end_time_ms=2.000"),
        ("/data/plugin/profile/data", f"run={RUN}&tag=overview_page&host=vm"),
        ("/hosts", f"run={RUN}&tag=trace_viewer"),
        ("/data", f"run={RUN}&tag=trace_viewer@&host=vm&event_name=jit(train)/dot&search_prefix=a/b"),
        ("/data", f"run={RUN}&tag=hlo_stats&hosts=vm,other"),
    ],
)
def test_the_run_is_served(path: str, query: str) -> None:
    assert _ask(path, query) == "200 OK served"


@pytest.mark.parametrize(
    "path, query",
    [
        ("/runs", "session_path=/etc"),
        ("/runs", "run_path=/home/user/other_logdir"),
        ("/data", "session_path=/tmp/x&run=x&tag=overview_page&host=vm"),
        ("/data", "run=../../../../tmp/victim/plugins/profile/r&tag=overview_page&host=vm"),
        ("/data", "run=other_run&tag=overview_page&host=vm"),
        ("/data", f"run={RUN}&tag=overview_page&host=../../etc/x"),
        ("/data", f"run={RUN}&tag=overview_page&host=..\\..\\x"),
        ("/data", f"run={RUN}&tag=overview_page&hosts=vm,../x"),
        ("/data", f"run={RUN}&tag=memory_viewer&host=vm&module_name=../../x"),
        ("/data", f"run={RUN}&tag=../x&host=vm"),
        ("/data", f"run={RUN}&tag=overview_page&host=.."),
        ("/data", f"run={RUN}&tag=overview_page&host=vm%00.txt"),
        ("/run_tools", f"run={RUN}&run_path=/"),
        ("/capture_profile", "service_addr=10.0.0.1:8466&duration=1000"),
        ("/data/plugin/profile/capture_profile", "service_addr=localhost:1"),
        ("/generate_cache", ""),
        ("/generate_cache/", "session_path=/tmp"),
        ("/data", "worker_list=10.0.0.1"),
    ],
)
def test_other_folders_addresses_and_routes_are_refused(path: str, query: str) -> None:
    assert _ask(path, query).startswith("403 Forbidden refused: ")


@pytest.mark.parametrize(
    "headers",
    [
        {"host": "evil.example"},
        {"host": f"evil.example:{PORT}"},
        {"host": f"127.0.0.1:{PORT + 1}"},
        {"host": f"0.0.0.0:{PORT}"},
        {"host": f"[::1]:{PORT}"},
        {"host": None},
        {"origin": "http://evil.example"},
        {"origin": "null"},
        {"origin": f"http://127.0.0.1:{PORT}.evil.example"},
        {"origin": f"https://127.0.0.1:{PORT}"},
        {"sec_fetch_site": "cross-site", "sec_fetch_mode": "cors"},
        {"sec_fetch_site": "same-site", "sec_fetch_mode": "no-cors"},
    ],
)
def test_other_hosts_and_origins_are_refused(headers: dict[str, str | None]) -> None:
    assert _ask("/runs", **headers).startswith("403 Forbidden refused: ")  # type: ignore[arg-type]


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "OPTIONS", "PATCH"])
def test_only_get_and_head(method: str) -> None:
    assert _ask("/runs", method=method).startswith("403 Forbidden refused: method")


def test_own_origin_and_navigation_are_served() -> None:
    assert _ask("/runs", origin=f"http://127.0.0.1:{PORT}") == "200 OK served"
    assert _ask("/runs", host=f"localhost:{PORT}", origin=f"http://localhost:{PORT}") == "200 OK served"
    assert _ask("/", sec_fetch_site="none", sec_fetch_mode="navigate") == "200 OK served"
    assert _ask("/", sec_fetch_site="cross-site", sec_fetch_mode="navigate") == "200 OK served"
    assert _ask("/runs", method="HEAD") == "200 OK served"

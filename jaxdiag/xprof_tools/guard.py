"""What XProf's web server answers when ``jaxdiag open`` runs it: only the one run, only to this machine.

XProf's server takes any folder a request names (``?session_path=``,
``?run_path=``, a ``run`` or ``host`` with ``..`` in it), reads the captures
there and writes its caches beside them; ``/capture_profile`` connects to any
address it is given. Any web page open in the user's browser can send such a
request to a loopback port. ``Guard`` wraps XProf's WSGI application and
refuses, with 403 and one line of text:

- a request whose Host is not this server's loopback address (DNS rebinding);
- a request from another origin (an ``Origin`` header, or a browser's
  ``Sec-Fetch-Site``, naming another site), except a top-level page load;
- any method but GET and HEAD, and the routes that capture or write caches
  on request (``/capture_profile``, ``/generate_cache``);
- the parameters that name folders or addresses (``session_path``,
  ``run_path``, ``service_addr``, ``worker_list``), a ``run`` other than the
  served one, and any host, module or tool name that could leave the run's
  folder (a path separator, ``..``, a NUL).

Pure WSGI: it imports nothing from XProf, so it is tested without starting one.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any

#: Parameters by which XProf would read (and write caches in) a folder, or connect to an address.
REFUSED_PARAMETERS = frozenset({"session_path", "run_path", "service_addr", "worker_list"})
#: Routes that start a capture or write caches on request.
REFUSED_ROUTES = frozenset({"/capture_profile", "/generate_cache"})
#: Parameters whose values XProf joins to the run's folder as file names.
NAME_PARAMETERS = frozenset({"host", "hosts", "module_name", "tag", "program_id"})
_PREFIX = "/data/plugin/profile"

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class Guard:
    """A WSGI application that passes to ``app`` only requests for ``runs`` from this machine's own pages."""

    def __init__(self, app: WsgiApp, port: int, runs: Iterable[str]) -> None:
        self.app = app
        self.runs = frozenset(runs)
        self.hosts = frozenset({f"127.0.0.1:{port}", f"localhost:{port}"})
        self.origins = frozenset(f"http://{h}" for h in self.hosts)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        why = self.refusal(environ)
        if why is None:
            return self.app(environ, start_response)
        body = f"refused: {why}\n".encode()
        start_response("403 Forbidden", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]

    def refusal(self, environ: dict[str, Any]) -> str | None:
        """Why the request is refused, or ``None`` to serve it."""
        method = environ.get("REQUEST_METHOD", "GET")
        if method not in ("GET", "HEAD"):
            return f"method {method}"
        if environ.get("HTTP_HOST") not in self.hosts:
            return "this server answers only at its 127.0.0.1 address"
        origin = environ.get("HTTP_ORIGIN")
        if origin is not None and origin not in self.origins:
            return "a request from another origin"
        site = environ.get("HTTP_SEC_FETCH_SITE")
        if site not in (None, "same-origin", "none") and environ.get("HTTP_SEC_FETCH_MODE") != "navigate":
            return "a request from another site"
        path = environ.get("PATH_INFO") or "/"
        if path == _PREFIX or path.startswith(_PREFIX + "/"):
            path = path[len(_PREFIX) :] or "/"
        if path.rstrip("/") in REFUSED_ROUTES:
            return f"{path.rstrip('/')} is not served"
        query = urllib.parse.parse_qs(environ.get("QUERY_STRING") or "", keep_blank_values=True)
        for name, values in query.items():
            if name in REFUSED_PARAMETERS:
                return f"parameter {name}: this server serves only the run it was started for"
            for value in values:
                if "\x00" in value:
                    return f"parameter {name}: a NUL character"
                if name == "run" and value not in self.runs:
                    return f"run {value!r} is not served here"
                if name in NAME_PARAMETERS and any(_leaves_folder(v) for v in value.split(",")):
                    return f"parameter {name}: {value!r} is not a name"
        return None


def _leaves_folder(name: str) -> bool:
    return "/" in name or "\\" in name or name.strip() in (".", "..")

"""What Lattice adjusts in the ASGI server it runs under, in one place: the application
(lattice_site/asgi.py) and the benchmarks' echo server (bench/echo_asgi.py) call it alike, so a
ceiling measured on the echo server runs under the same server settings as Lattice's consumers."""

from __future__ import annotations

from typing import Any

from lattice_site import gc_tuning
from lattice_site.websocket_limits import close_oversized_with_1009
from lattice_site.websocket_speed import plain_debug_arguments


def for_daphne() -> None:
    """Call once the application is loaded (Daphne builds its WebSocket factory after loading it)."""
    close_oversized_with_1009()
    plain_debug_arguments()
    forms_left_to_django()
    gc_tuning.for_long_running_process()  # last: freezes everything loaded so far


def forms_left_to_django() -> None:
    """Twisted reads every POST form body into its own ``request.args`` before Daphne sees the
    request, which Daphne never uses: it hands the raw body on. A ``multipart/form-data`` body it
    cannot read was answered there, a bare 400 with no body (not the API's JSON field errors),
    and every form the console posts was parsed twice. Each request Daphne makes now leaves the
    body to Django. Idempotent."""
    try:
        # Here, not at the top: Daphne is one server among those that may load the application.
        from daphne.http_protocol import WebRequest  # (as above)
    except ImportError:
        return
    if getattr(WebRequest, "_lattice_forms_left", False):
        return
    made = WebRequest.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        self._parsePOSTFormSubmission = False  # (Twisted's switch for that parsing, on by default)

    WebRequest.__init__ = init  # type: ignore[method-assign]
    WebRequest._lattice_forms_left = True  # type: ignore[attr-defined]

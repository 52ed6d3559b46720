"""What Lattice adjusts in the ASGI server it runs under, in one place: the application
(lattice_site/asgi.py) and the benchmarks' echo server (bench/echo_asgi.py) call it alike, so a
ceiling measured on the echo server runs under the same server settings as Lattice's consumers."""

from __future__ import annotations

from lattice_site import gc_tuning
from lattice_site.websocket_limits import close_oversized_with_1009
from lattice_site.websocket_speed import plain_debug_arguments


def for_daphne() -> None:
    """Call once the application is loaded (Daphne builds its WebSocket factory after loading it)."""
    close_oversized_with_1009()
    plain_debug_arguments()
    gc_tuning.for_long_running_process()  # last: freezes everything loaded so far

"""Autobahn (Daphne's WebSocket layer) formats its debug messages' arguments for every frame.

Each frame received and each frame sent calls ``autobahn.util.hltype`` and ``hlval``
(a qualified name looked up through ``inspect`` and coloured by click) to build the
arguments of a ``log.debug`` call, even when debug logging is off and the message is
dropped: eight colourings per heartbeat and its ack, about a tenth of the server's
CPU per heartbeat frame (profiled at 4,000 heartbeats per second). Where the debug
level is off, the names the frame path uses are pointed at plain formatters: the
messages, were debug logging turned on, say the same without colour.
"""

from __future__ import annotations

from typing import Any

_APPLIED = "_lattice_plain_debug_arguments"


def _plain_type(obj: Any) -> str:
    return f"<{getattr(obj, '__qualname__', type(obj).__qualname__)}>"


def _plain_value(value: Any, *args: Any, **kwargs: Any) -> str:
    return f"{value}"


def plain_debug_arguments() -> None:
    """Idempotent; nothing when Autobahn is not installed or its debug messages are wanted
    (txaio's global log level at debug or trace)."""
    try:
        # Here, not at the top: Daphne is one server among those that may load the application.
        import txaio  # (Autobahn's logging)
        from autobahn.twisted import websocket as twisted_websocket  # (as above)
        from autobahn.websocket import protocol  # (as above)
    except ImportError:
        return
    if getattr(protocol, _APPLIED, False) or txaio.get_global_log_level() in ("debug", "trace"):
        return
    for module in (protocol, twisted_websocket):
        module.hltype = _plain_type  # type: ignore[attr-defined]
        module.hlval = _plain_value  # type: ignore[attr-defined]
    setattr(protocol, _APPLIED, True)

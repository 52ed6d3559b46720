"""A WebSocket message past Daphne's size limit is refused with close code 1009, not dropped.

Daphne refuses an incoming message larger than ``--websocket-max-message-size``
(1 MiB by default) through Autobahn, whose servers "fail by drop": the TCP
connection is cut with no close frame, and an agent sees its socket vanish with
no reason (and resends the same frame after reconnecting). With ``failByDrop``
off, Autobahn sends the close frame 1009 ("message too big") first. Frames past
the protocol's 64 KiB but within the server's limit reach the consumer and are
answered BAD_FRAME (nodes/protocol.py).
"""

from __future__ import annotations

from typing import Any

_APPLIED = "_lattice_closes_oversized"


def close_oversized_with_1009() -> None:
    """Make Daphne's WebSocket factories close with a code instead of dropping; idempotent.
    Called when the ASGI application is loaded, which Daphne does before it builds them."""
    try:
        # Here, not at the top: Daphne is one server among those that may load the application.
        from daphne.ws_protocol import WebSocketFactory
    except ImportError:  # served by something else: nothing to adjust
        return
    if getattr(WebSocketFactory, _APPLIED, False):
        return
    original = WebSocketFactory.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.setProtocolOptions(failByDrop=False)

    WebSocketFactory.__init__ = __init__  # type: ignore[method-assign]
    setattr(WebSocketFactory, _APPLIED, True)

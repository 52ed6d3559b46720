"""Daphne's replies leave at once instead of on the next turn of the event loop.

Twisted buffers every ``transport.write`` and registers the socket for writing
(an ``epoll_ctl``); the loop wakes again because the socket is writable, sends
the buffer and unregisters it (another ``epoll_ctl``). An agent's ack is one
small write on an idle socket, so every heartbeat paid a second wake-up of the
server for it: at 1,000 agents x 1/5 s, Twisted's writer registration and the
deferred send were about a tenth of the Daphne process (py-spy).

With the patch a write on a plain (non-TLS) TCP connection whose buffer is empty
is sent right away; whatever the kernel does not take (a full send buffer), or
any write while data is still buffered, goes through Twisted's buffer as before,
so the order of the bytes, back-pressure on producers and the handling of a lost
connection are unchanged.
"""

from __future__ import annotations

from typing import Any

_APPLIED = "_lattice_immediate_writes"


def immediate_writes() -> None:
    """Idempotent; nothing when Twisted is not installed (another server loads the application)."""
    try:
        # Here, not at the top: Daphne is one server among those that may load the application.
        from twisted.internet import tcp
    except ImportError:
        return
    if getattr(tcp.Connection, _APPLIED, False):
        return
    buffered = tcp.Connection.write

    def write(self: Any, data: bytes) -> None:
        if (data and not self.TLS and self.connected and not self.disconnecting and not self._writeDisconnected
                and not self.dataBuffer and not self._tempDataLen and isinstance(data, bytes)):
            sent = self.writeSomeData(data)
            if isinstance(sent, int) and sent >= 0:
                if sent == len(data):
                    return
                data = data[sent:]
            # A lost connection: buffered as before, and Twisted finds it lost when it writes.
        buffered(self, data)

    tcp.Connection.write = write  # type: ignore[method-assign]
    setattr(tcp.Connection, _APPLIED, True)

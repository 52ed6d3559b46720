"""A write on an idle plain TCP connection leaves at once; anything else goes through Twisted's
buffer as before (lattice_site/tcp_writes.py). Real sockets; the reactor, which the connection only
asks to watch its socket, is a recorder."""

import socket

from twisted.internet import tcp
from twisted.internet.protocol import Protocol

from lattice_site.asgi import application  # noqa: F401  (loading the application applies it)
from lattice_site.tcp_writes import _APPLIED


class Reactor:
    def __init__(self) -> None:
        self.writers: set[object] = set()  # as a reactor's: watched or not

    def addWriter(self, fd: object) -> None:  # noqa: N802  (Twisted's name)
        self.writers.add(fd)

    def removeWriter(self, fd: object) -> None:  # noqa: N802
        self.writers.discard(fd)

    def callLater(self, *args: object, **kwargs: object) -> None:  # noqa: N802
        return None


def connection(sndbuf: int | None = None) -> tuple[tcp.Connection, socket.socket, Reactor]:
    ours, peer = socket.socketpair()
    if sndbuf:
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    ours.setblocking(False)
    reactor = Reactor()
    conn = tcp.Connection(ours, Protocol(), reactor)
    conn.connected = 1
    return conn, peer, reactor


def read_all(peer: socket.socket, size: int, conn: tcp.Connection) -> bytes:
    got = bytearray()
    peer.settimeout(5)
    while len(got) < size:
        if conn.dataBuffer or conn._tempDataLen:
            conn.doWrite()  # what the reactor does when the socket is writable
        got += peer.recv(1 << 16)
    return bytes(got)


def test_the_application_applies_it():
    assert getattr(tcp.Connection, _APPLIED) is True


def test_a_write_on_an_idle_connection_is_sent_without_waiting_for_the_loop():
    conn, peer, reactor = connection()
    conn.write(b'{"type":"ack","id":"1"}')
    peer.settimeout(5)
    assert peer.recv(100) == b'{"type":"ack","id":"1"}'
    assert reactor.writers == set()  # nothing left to send: the loop is not woken for it
    assert conn.dataBuffer == b"" and conn._tempDataLen == 0


def test_what_the_kernel_does_not_take_is_buffered_and_order_kept():
    conn, peer, reactor = connection(sndbuf=4096)
    big = bytes(range(256)) * 8192  # 2 MiB: far past the send buffer
    conn.write(big)
    assert reactor.writers == {conn}  # the rest waits for the socket to be writable
    conn.write(b"tail")  # behind the buffered rest, never before it
    assert read_all(peer, len(big) + 4, conn) == big + b"tail"
    assert reactor.writers == set()


def test_nothing_is_sent_on_a_lost_or_closing_connection():
    conn, peer, reactor = connection()
    conn.connected = 0
    conn.write(b"late")
    conn.connected, conn.disconnecting = 1, True
    conn.write(b"queued")  # as Twisted does: buffered, sent before the close
    peer.setblocking(False)
    try:
        early = peer.recv(100)
    except BlockingIOError:
        early = b""
    assert early == b""
    assert read_all(peer, 6, conn) == b"queued"

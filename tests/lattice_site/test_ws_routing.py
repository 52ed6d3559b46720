"""WebSocket paths no route serves: refused at the handshake, never an error in the server."""

from __future__ import annotations

import logging

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator

from lattice_site.asgi import application

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", ["/ws/ops/", "/ws/live/ops/", "/ws/agent/x/", "/", "/nothing-here"])
def test_a_socket_to_an_unknown_path_is_refused_without_an_error(path, caplog):
    async def scenario():
        comm = WebsocketCommunicator(application, path, headers=[(b"origin", b"http://127.0.0.1")])
        connected, _ = await comm.connect(timeout=5)
        await comm.disconnect()
        return connected

    with caplog.at_level(logging.ERROR):
        assert async_to_sync(scenario)() is False
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]

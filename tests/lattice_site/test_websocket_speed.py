"""Autobahn's per-frame debug arguments are built without colour lookups when debug is off."""

import txaio
from autobahn.twisted import websocket as twisted_websocket
from autobahn.websocket import protocol

from lattice_site import websocket_speed
from lattice_site.asgi import application  # noqa: F401  (loading the application applies it)


def test_loading_the_application_makes_the_frame_path_debug_arguments_plain():
    assert protocol.hltype is websocket_speed._plain_type
    assert twisted_websocket.hlval is websocket_speed._plain_value
    named = protocol.hltype(protocol.WebSocketProtocol.sendData)
    assert named == "<WebSocketProtocol.sendData>"
    assert "\x1b" not in named and "\x1b" not in twisted_websocket.hlval(42, color="blue")
    assert twisted_websocket.hlval(42) == "42"


def test_left_alone_when_debug_messages_are_wanted(monkeypatch):
    monkeypatch.delattr(protocol, websocket_speed._APPLIED, raising=False)
    coloured = object()
    monkeypatch.setattr(protocol, "hltype", coloured)
    monkeypatch.setattr(txaio, "get_global_log_level", lambda: "debug")
    websocket_speed.plain_debug_arguments()
    assert protocol.hltype is coloured
    monkeypatch.setattr(txaio, "get_global_log_level", lambda: "info")
    websocket_speed.plain_debug_arguments()
    assert protocol.hltype is websocket_speed._plain_type

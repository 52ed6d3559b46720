"""The dispatch every Lattice consumer runs: one message at a time, in arrival order, from the
client and the channel layer; a handler's error ends the consumer, a disconnect ends it cleanly."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from asgiref.sync import async_to_sync
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from lattice_site.consumers import DirectDispatch

# Channels' disconnect handler closes stale database connections, so these tests may touch them.
pytestmark = pytest.mark.django_db


class Recorder(DirectDispatch, AsyncWebsocketConsumer):
    """Echoes client frames slowly and channel-layer notes at once, logging when each starts and ends."""

    group = ""
    log: list[str] = []

    async def connect(self) -> None:
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(self.group, self.channel_name)
        self.log.append("disconnected")

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        self.log.append(f"start {text_data}")
        await asyncio.sleep(0.2)
        self.log.append(f"end {text_data}")
        await self.send(text_data=text_data)

    async def note(self, message: dict[str, str]) -> None:
        self.log.append(f"start {message['text']}")
        self.log.append(f"end {message['text']}")
        await self.send(text_data=message["text"])

    async def boom(self, message: dict[str, str]) -> None:
        raise RuntimeError("a handler failed")


@pytest.fixture
def recorder(settings):
    """The in-process channel layer: the dispatch does not depend on the layer, and a test that
    ends right after a message arrived must not leave the Redis layer's per-channel state behind
    for later tests."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    Recorder.group, Recorder.log = f"test-{uuid.uuid4().hex}", []
    return Recorder


def test_a_channel_message_waits_for_the_frame_being_handled(recorder):
    async def scenario():
        comm = WebsocketCommunicator(recorder.as_asgi(), "/")
        assert (await comm.connect(timeout=10))[0]
        await comm.send_to(text_data="frame")
        await asyncio.sleep(0.05)  # the frame's handler is sleeping now
        await get_channel_layer().group_send(recorder.group, {"type": "note", "text": "note"})
        assert await comm.receive_from(timeout=5) == "frame"
        assert await comm.receive_from(timeout=5) == "note"
        await comm.disconnect()

    async_to_sync(scenario)()
    assert recorder.log == ["start frame", "end frame", "start note", "end note", "disconnected"]


def test_frames_are_handled_in_the_order_they_arrive(recorder):
    async def scenario():
        comm = WebsocketCommunicator(recorder.as_asgi(), "/")
        assert (await comm.connect(timeout=10))[0]
        for text in ("one", "two", "three"):
            await comm.send_to(text_data=text)
        assert [await comm.receive_from(timeout=5) for _ in range(3)] == ["one", "two", "three"]
        await comm.disconnect()

    async_to_sync(scenario)()
    assert recorder.log[:6] == ["start one", "end one", "start two", "end two", "start three", "end three"]


def test_a_failing_channel_handler_ends_the_consumer_with_its_error(recorder):
    async def scenario():
        comm = WebsocketCommunicator(recorder.as_asgi(), "/")
        assert (await comm.connect(timeout=10))[0]
        await get_channel_layer().group_send(recorder.group, {"type": "boom"})
        with pytest.raises(RuntimeError, match="a handler failed"):
            await comm.receive_output(timeout=5)

    async_to_sync(scenario)()


def test_a_disconnect_ends_the_consumer_cleanly_and_leaves_the_group(recorder):
    async def scenario():
        comm = WebsocketCommunicator(recorder.as_asgi(), "/")
        assert (await comm.connect(timeout=10))[0]
        await comm.disconnect()  # raises if the consumer ended with an error or did not end
        await get_channel_layer().group_send(recorder.group, {"type": "note", "text": "nobody"})
        assert await comm.receive_nothing(timeout=0.2)

    async_to_sync(scenario)()
    assert recorder.log == ["disconnected"]

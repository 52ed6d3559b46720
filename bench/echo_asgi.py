"""A trivial Channels consumer that echoes each frame: the ceiling bench/agents.py compares against,
served with the same server settings as Lattice (lattice_site/server_tuning.py)."""

import os

import django
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.routing import ProtocolTypeRouter, URLRouter
from django.urls import path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lattice_site.settings.dev")
django.setup()

from lattice_site import server_tuning  # noqa: E402
from lattice_site.consumers import DirectDispatch  # noqa: E402


class Echo(DirectDispatch, AsyncWebsocketConsumer):  # dispatched as Lattice's consumers are
    async def receive(self, text_data=None, bytes_data=None):
        await self.send(text_data=text_data)


application = ProtocolTypeRouter({"websocket": URLRouter([path("ws/agent/", Echo.as_asgi())])})
server_tuning.for_daphne()

"""A node deleted (in the admin): its agents' connections are closed (4401), in whichever server
process holds them, as when its tokens are revoked; its tokens went with it. Before, such a
connection stayed open, its frames answered with errors, and it kept the channel-layer group of
the node's name: a node created again under that name had its agent sent away (4409, the old
connection counted as the newer) and its commands went to the deleted node's agent."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete
from django.dispatch import receiver

from nodes.models import Node
from scheduling.dispatch import agent_revoked_on_commit


@receiver(post_delete, sender=Node, dispatch_uid="lattice-node-deleted")
def _node_deleted(sender: Any, instance: Node, **kwargs: Any) -> None:
    agent_revoked_on_commit(instance.name)

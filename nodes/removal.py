"""Credentials taken away outside the token actions (nodes/actions.py), as the admin does: a node
deleted, or one of its tokens revoked or deleted. The connections they authenticated are closed
(4401) after commit, in whichever server process holds them, as the actions' revocations close
theirs. Before, such a connection stayed open; a deleted node's kept the channel-layer group of
its name, so a node made again under that name had its agent sent away (4409, the old connection
counted the newer) and its commands sent to the deleted node's agent."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from nodes.models import AgentToken, Node
from scheduling.dispatch import agent_revoked_on_commit


@receiver(post_delete, sender=Node, dispatch_uid="lattice-node-deleted")
def _node_deleted(sender: Any, instance: Node, **kwargs: Any) -> None:
    agent_revoked_on_commit(instance.name)


@receiver(post_save, sender=AgentToken, dispatch_uid="lattice-agent-token-saved")
@receiver(post_delete, sender=AgentToken, dispatch_uid="lattice-agent-token-deleted")
def _token_gone(sender: Any, instance: AgentToken, signal: Any, **kwargs: Any) -> None:
    if signal is post_save and instance.revoked_at is None:
        return  # issued, or still good
    # (Its node's row is still there when the node's deletion takes its tokens: they go first.)
    name = Node.objects.filter(pk=instance.node_id).values_list("name", flat=True).first()
    if name is not None:
        agent_revoked_on_commit(name, tokens=[instance.pk])

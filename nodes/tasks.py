from __future__ import annotations

from celery import shared_task

from nodes.actions import node_liveness_sweep, processed_frames_prune


@shared_task(name="nodes.liveness", ignore_result=True, time_limit=60)
def node_liveness() -> None:
    node_liveness_sweep()
    processed_frames_prune()

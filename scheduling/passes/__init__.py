"""The scheduler pass (see docs/architecture.md): snapshot, decide, apply, per resource group.

Modules: ``run`` (the pass loop), ``state`` (what one pass carries), ``queue`` (pending work in
the policy's order), ``holds`` (nodes reserved for preemptors), ``writes`` (batched writes of
starts, preemptions and waits), ``records`` (decision records), ``snapshot`` and
``snapshot_cache`` (the cluster as the engine sees it, kept between passes), ``quota_book``
(tenants' quota use within a pass), ``bulk`` (array-bound SQL for batches), ``locks``.
"""

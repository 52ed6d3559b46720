"""Replay: a workload trace through a policy in virtual time (docs/replay.md).

``trace`` (the job record and reading statistics), ``mapping`` (trace columns to tenants,
vClusters, session types, classes and priorities), ``readers`` (SWF and the Slurm CSV),
``history`` (Lattice's own allocations), ``spec`` (the cluster from a JSON spec or a resource
group), ``sim`` (the discrete-event simulation on the engine), ``stats`` (what is measured),
``report`` and ``html`` (the JSON and HTML reports), ``progress`` (the stderr bar).
"""

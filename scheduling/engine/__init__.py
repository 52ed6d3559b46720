"""The pure decision engine of docs/decisions.md. No Django, no clock, no I/O."""

from .cluster import Cluster
from .decide import Candidate, Decision, Victim, decide, decide_scenario
from .model import Allocation, Node, Policy, Scenario, SessionType, Tenant, VCluster
from .parse import MAX_DURATION_MINUTES, InvalidDocument, parse_policy, parse_scenario, parse_time

__all__ = [
    "MAX_DURATION_MINUTES", "Allocation", "Candidate", "Cluster", "Decision", "InvalidDocument", "Node", "Policy",
    "Scenario", "SessionType", "Tenant", "VCluster", "Victim", "decide", "decide_scenario",
    "parse_policy", "parse_scenario", "parse_time",
]

from .allocations import Allocation, AllocationEvent, Placement
from .cluster import ResourceGroup, SessionType, VCluster
from .records import DecisionAudience, PolicyChange, PreemptionDecision
from .tenancy import ApiToken, Membership, Quota, Tenant

__all__ = [
    "Allocation", "AllocationEvent", "ApiToken", "DecisionAudience", "Membership", "Placement", "PolicyChange",
    "PreemptionDecision", "Quota", "ResourceGroup", "SessionType", "Tenant", "VCluster",
]

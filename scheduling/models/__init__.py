from .allocations import Allocation, AllocationEvent, Placement
from .cluster import ResourceGroup, SessionType, VCluster
from .records import PolicyChange, PreemptionDecision
from .tenancy import ApiToken, Membership, Quota, Tenant

__all__ = [
    "Allocation", "AllocationEvent", "ApiToken", "Membership", "Placement", "PolicyChange",
    "PreemptionDecision", "Quota", "ResourceGroup", "SessionType", "Tenant", "VCluster",
]

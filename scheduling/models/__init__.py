from .allocations import Allocation, AllocationEvent, JobArray, Placement, PlacementDevice
from .cluster import ResourceGroup, SessionType, VCluster
from .records import (
    DecisionAudience,
    MetricRollup,
    PolicyChange,
    PreemptionDecision,
    SnapshotChange,
)
from .tenancy import ApiToken, Membership, Quota, Tenant, TenantShare
from .usage import UsageSample, UsageScope

__all__ = [
    "Allocation", "AllocationEvent", "ApiToken", "DecisionAudience", "JobArray", "Membership", "MetricRollup",
    "Placement", "PlacementDevice", "PolicyChange", "PreemptionDecision", "Quota", "ResourceGroup", "SessionType",
    "SnapshotChange", "Tenant",
    "TenantShare", "UsageSample", "UsageScope", "VCluster",
]

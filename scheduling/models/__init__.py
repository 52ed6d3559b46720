from .allocations import Allocation, AllocationEvent, JobArray, Placement, PlacementDevice
from .cluster import ResourceGroup, SessionType, VCluster
from .evaluations import EvaluationStatus, PolicyEvaluation
from .records import (
    REASON_MAX_LENGTH,
    DecisionAudience,
    MetricRollup,
    PolicyChange,
    PreemptionDecision,
    SnapshotChange,
)
from .tenancy import (
    ApiToken,
    Membership,
    PriorityPolicy,
    Quota,
    Tenant,
    TenantShare,
    priority_policy,
)
from .usage import UsageSample, UsageScope

__all__ = [
    "Allocation", "AllocationEvent", "ApiToken", "DecisionAudience", "EvaluationStatus", "JobArray", "Membership", "MetricRollup",
    "Placement", "PlacementDevice", "PolicyChange", "PolicyEvaluation", "PreemptionDecision", "PriorityPolicy", "Quota", "REASON_MAX_LENGTH",
    "ResourceGroup", "SessionType", "SnapshotChange", "Tenant", "priority_policy",
    "TenantShare", "UsageSample", "UsageScope", "VCluster",
]

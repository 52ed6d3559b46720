"""Compute nodes and the tokens their agents authenticate with."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

from scheduling.flat_maps import labels_problem, validate_labels
from scheduling.models.secrets import HashedToken


class NodeState(models.TextChoices):
    UNKNOWN = "unknown", "Unknown"
    READY = "ready", "Ready"
    DEGRADED = "degraded", "Degraded"
    DOWN = "down", "Down"
    DRAINING = "draining", "Draining"
    DRAINED = "drained", "Drained"


# Xid codes NVIDIA documents as a hardware or driver fault of the GPU (not an application's error):
# 48 double-bit ECC, 63/64 row remapping, 74 NVLink, 79 fallen off the bus, 92 high single-bit
# ECC rate, 94/95 contained/uncontained ECC, 119/120 GSP errors.
DEFAULT_XIDS = "48,63,64,74,79,92,94,95,119,120"
XID_LIST = RegexValidator(r"^(\d{1,4}(,\d{1,4})*)?$", "Xid codes separated by commas, such as 48,79")


class Node(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    resource_group = models.ForeignKey("scheduling.ResourceGroup", on_delete=models.PROTECT,
                                       related_name="nodes")
    vcluster = models.ForeignKey("scheduling.VCluster", on_delete=models.PROTECT, null=True, blank=True,
                                 related_name="home_nodes", help_text="Home vCluster.")
    borrowed_by = models.ForeignKey("scheduling.VCluster", on_delete=models.SET_NULL, null=True, blank=True,
                                    related_name="borrowed_nodes")
    gpu = models.PositiveIntegerField(default=0)
    cpu = models.PositiveIntegerField(default=0)
    memory = models.PositiveIntegerField(default=0, help_text="GiB")
    labels = models.JSONField(default=dict, blank=True, validators=[validate_labels],
                              help_text='Flat: {"name": "value"} (scheduling/flat_maps.py bounds it).')
    state = models.CharField(max_length=10, choices=NodeState.choices, default=NodeState.UNKNOWN,
                             db_index=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    last_seq = models.BigIntegerField(default=0)
    agent_version = models.CharField(max_length=32, blank=True)
    agent_connections = models.PositiveBigIntegerField(
        default=0, editable=False, help_text="Agent connections authenticated so far: orders them, the newest stays.")
    # What the agent reported of its GPUs at its last hello (null: never, or an agent that does not
    # report devices). Fewer healthy GPUs than registered lowers the capacity the scheduler sees.
    gpu_healthy = models.PositiveIntegerField(null=True, blank=True,
                                              help_text="Healthy GPUs the agent reported; blank: unknown.")
    devices_reported_at = models.DateTimeField(null=True, blank=True)
    device_mismatch = models.CharField(max_length=255, blank=True,
                                       help_text="How the reported GPUs differ from the registered capacity.")
    cgroups = models.BooleanField(null=True, blank=True,
                                  help_text="Whether the agent limits each allocation with cgroups; blank: unknown.")
    cgroups_note = models.CharField(max_length=255, blank=True,
                                    help_text="Why the agent cannot limit allocations, as it said at hello.")
    # GPU health from heartbeats (nodes/health.py): the latest per-GPU report, and why the node is
    # Degraded by it ("" when healthy). Thresholds are the operator's (audited), with defaults.
    gpu_health = models.JSONField(default=list, blank=True)
    health_reason = models.CharField(max_length=255, blank=True,
                                     help_text="Why GPU health made the node Degraded; blank: healthy.")
    gpu_max_temperature_c = models.PositiveSmallIntegerField(
        default=90, help_text="A GPU hotter than this (degrees C) makes the node Degraded.")
    gpu_max_ecc_uncorrectable = models.PositiveIntegerField(
        default=0, help_text="More volatile uncorrectable ECC errors than this on a GPU make the node Degraded.")
    gpu_retired_pending_degrades = models.BooleanField(
        default=True, help_text="Pages waiting for retirement (a reset) make the node Degraded.")
    gpu_xids = models.CharField(max_length=255, blank=True, default=DEFAULT_XIDS, validators=[XID_LIST],
                                help_text="Xid events that make the node Degraded (comma-separated codes).")

    class Meta:
        ordering = ["name"]
        indexes = [models.Index(fields=["resource_group", "state"], name="node_rg_state_idx")]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=NodeState.values), name="node_state_valid"),
            models.CheckConstraint(condition=~Q(borrowed_by=models.F("vcluster")), name="node_not_borrowed_by_home"),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        # Here too, not only as the field's validator: a field skips its validators for an empty
        # value ([], "", None), and those are no mapping either.
        problem = labels_problem(self.labels)
        if problem is not None:
            raise ValidationError({"labels": problem})
        if self.vcluster is not None and self.vcluster.resource_group_id != self.resource_group_id:
            raise ValidationError({"vcluster": "must be a vCluster of the node's resource group"})

    @property
    def capacity(self) -> dict[str, float]:
        return {r: float(getattr(self, r)) for r in ("gpu", "cpu", "memory") if getattr(self, r)}

    @property
    def usable_gpu(self) -> int:
        """The GPUs new work may use: the registered ones, fewer when fewer healthy were reported."""
        return self.gpu if self.gpu_healthy is None else min(self.gpu, self.gpu_healthy)


class NodeDevice(models.Model):
    """One GPU of a node, as its agent reported it at its last hello."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="devices")
    index = models.PositiveIntegerField()
    uuid = models.CharField(max_length=128)
    model = models.CharField(max_length=128, blank=True)
    memory_mib = models.PositiveIntegerField(default=0)
    healthy = models.BooleanField(default=True)
    mig = models.JSONField(default=list, blank=True, help_text="MIG instances: [{uuid, memory_mib?}].")

    class Meta:
        ordering = ["node", "index"]
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="node_device_unique")]

    def __str__(self) -> str:
        return f"{self.node_id}:{self.index}"


class AgentToken(HashedToken):
    """A node agent's bearer token; stored only as a hash, shown once when issued."""

    KIND = "lat"
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="tokens")
    # The demo's simulated fleet (run_agent --simulate-all) replaces only the tokens it issued:
    # a token issued by hand or by an operator stays valid across demo restarts.
    simulated = models.BooleanField(default=False, help_text="Issued for a simulated agent.")

    class Meta(HashedToken.Meta):
        pass

    def __str__(self) -> str:
        return f"{self.prefix}… for {self.node}"


class ProcessedFrame(models.Model):
    """Ids of state-changing frames already applied, with a digest of what each said, so a repeated
    frame has no further effect and an id reused for another frame is told apart."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    frame_id = models.CharField(max_length=128)
    # SHA-256 of the frame without its id (nodes.actions.frame_digest): a repeat of the id with
    # other content is refused, not acknowledged. Blank for ids recorded before it was kept.
    digest = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "frame_id"], name="processed_frame_unique")]

    def __str__(self) -> str:
        return f"{self.node_id}:{self.frame_id}"

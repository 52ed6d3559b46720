"""API shapes. Field names follow the decision contract (vcluster, session_type, nodes, per_node...)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone
from rest_framework import serializers

from scheduling.actions.admission import membership_for, priority_for
from scheduling.admission_sql import vcluster_and_nodes
from scheduling.api.admission_checks import (
    MAX_ARRAY_INDEX,
    constraint_errors,
    dependency_errors,
    escape_errors,
    needs,
    never_fits_errors,
    parse_array,
    session_type_escapes,
    start_frame_errors,
)
from scheduling.api.input_fields import (
    EnvMap,
    GroupByName,
    PrintableText,
    RefuseUnknown,
    fresh_fields,
)
from scheduling.ascii_numbers import FloatInput, IntegerInput
from scheduling.engine import MAX_DURATION_MINUTES
from scheduling.errors import DomainError
from scheduling.flat_maps import MAX_LABEL_VALUE, validate_labels
from scheduling.models import (
    REASON_MAX_LENGTH,
    Allocation,
    AllocationEvent,
    ResourceGroup,
    SessionType,
    VCluster,
)
from scheduling.models.allocations import (
    RESOURCES,
    Checkpoint,
    DependencyStatus,
    DependencyType,
    HeldBy,
    RequeuePolicy,
)
from scheduling.selectors import array_counts


class ReasonInput(RefuseUnknown, serializers.Serializer):
    """Why an operator changes something; kept in the audit log."""

    reason = serializers.CharField(max_length=REASON_MAX_LENGTH)


class VerbInput(RefuseUnknown, serializers.Serializer):
    """Why a job is held, released or requeued; kept in the audit log and its history. Operators
    must give one; a tenant's own hold may go without."""

    reason = serializers.CharField(max_length=REASON_MAX_LENGTH, required=False, allow_blank=True, default="")


class ArrayOutput(serializers.Serializer):
    id = serializers.IntegerField()
    spec = serializers.CharField()
    throttle = serializers.IntegerField(allow_null=True)
    size = serializers.IntegerField()
    resource_group = serializers.CharField(source="resource_group.name")
    tenant = serializers.CharField(source="tenant.name")
    submitted_at = serializers.DateTimeField()
    counts = serializers.SerializerMethodField(
        help_text="How many of its tasks are in each state (states with none left out), and how many are held.")
    tasks = serializers.SerializerMethodField(help_text="Each task: id, index, state, held.")

    def get_counts(self, array: Any) -> dict[str, int]:
        counts = self.context.get("counts")
        return counts.get(array.pk, {}) if counts is not None else array_counts([array.pk]).get(array.pk, {})

    def get_tasks(self, array: Any) -> list[dict[str, Any]]:
        return [{"id": pk, "index": index, "state": state, "held": held} for pk, index, state, held in
                array.tasks.order_by("array_index").values_list("id", "array_index", "state", "held")]


class ArrayLine(ArrayOutput):
    """An array as one line of the list: its counts, not its tasks (``/arrays/{id}/`` has them)."""

    tasks = None  # type: ignore[assignment]


class ConstraintsField(RefuseUnknown, serializers.Serializer):
    labels = serializers.DictField(child=serializers.CharField(max_length=MAX_LABEL_VALUE), required=False,
                                   validators=[validate_labels])
    same = serializers.CharField(max_length=64, required=False)


class DependencyInput(RefuseUnknown, serializers.Serializer):
    type = serializers.ChoiceField(choices=DependencyType.choices)
    job = IntegerInput(min_value=1, max_value=2**63 - 1)  # an id: past it, the database's error


class AllocationInput(RefuseUnknown, serializers.Serializer):
    """What a tenant submits. Validates everything; nothing is stored here."""

    resource_group = GroupByName(
        slug_field="name", queryset=ResourceGroup.objects.all(), required=False,
        help_text="Omitted: the tenant's default resource group (set by an operator on its quota).")
    tenant = serializers.CharField(required=False, max_length=64)
    name = PrintableText(required=False, allow_blank=True, max_length=128, default="")
    vcluster = serializers.CharField(required=False, allow_null=True, max_length=64, default=None)
    session_type = serializers.CharField(required=False, allow_null=True, max_length=64, default=None)
    nodes = IntegerInput(min_value=1, max_value=10_000, default=1)
    per_node = serializers.DictField(child=IntegerInput(min_value=0, max_value=1_000_000))
    preemption_class = IntegerInput(min_value=0, max_value=10, required=False)
    priority = IntegerInput(
        min_value=0, max_value=100, required=False, allow_null=True, default=None,
        help_text="Omitted: the default of the tenant's (or the user's) priority policy.")
    checkpoint = serializers.ChoiceField(choices=Checkpoint.choices, default=Checkpoint.NONE,
                                         help_text="none by default (also in the CLI and the web form)")
    checkpoint_minutes = FloatInput(min_value=0, max_value=1440, default=5)
    walltime_minutes = FloatInput(min_value=0.01, max_value=MAX_DURATION_MINUTES, required=False,
                                  allow_null=True, default=None, help_text="At most a century.")
    sensitive = serializers.BooleanField(default=False)
    preemptible = serializers.BooleanField(default=True)
    exclusive = serializers.BooleanField(default=False)
    forced = serializers.BooleanField(default=False)
    backfill = serializers.BooleanField(default=False)
    constraints = ConstraintsField(required=False)
    value = FloatInput(min_value=0, required=False, allow_null=True, default=None)
    preemptive = serializers.BooleanField(default=True)
    rank = IntegerInput(
        min_value=1, max_value=10000, required=False, allow_null=True, default=None,
        help_text="Its own preemption rank (rank kind), within its session type's rank_min..rank_max; "
                  "omitted: the type's rank.")
    command = serializers.ListField(child=serializers.CharField(max_length=4096), max_length=256, default=list)
    env = EnvMap()
    requeue_policy = serializers.ChoiceField(choices=RequeuePolicy.choices, default=RequeuePolicy.ON_NODE_FAILURE)
    max_requeue = IntegerInput(min_value=0, max_value=10, default=3)
    held = serializers.BooleanField(default=False, help_text="Submit it held: it waits until released.")
    depends_on = serializers.ListField(
        child=DependencyInput(), max_length=32, default=list,
        help_text='Earlier jobs of the same tenant: [{"type": "afterok|afterany|afternotok", "job": ID}]; '
                  "it is not considered until all are met.")
    kill_on_invalid_dep = serializers.BooleanField(
        default=True, help_text="Cancel it (DependencyNeverSatisfied) when a dependency can never be met; "
                                "false: it stays pending.")
    array = serializers.CharField(
        required=False, allow_null=True, default=None, max_length=255,
        help_text='Submit an array of tasks: "0-99%10", "1,3,5-7", "0-15:4"; %N runs at most N at once.')

    def get_fields(self) -> dict[str, serializers.Field]:
        """This request's own fields, as DRF's deep copy of the declared ones would give them, but
        a plain field (no child, not a serializer) is copied flat from an unbound one made once per
        process: DRF builds every field anew, its validators too, for every request
        (``input_fields``)."""
        return fresh_fields(type(self))

    def validate_array(self, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_array(value)
            except ValueError as exc:
                raise serializers.ValidationError(str(exc)) from None
        return value

    def validate_per_node(self, value: dict[str, int]) -> dict[str, int]:
        unknown = sorted(set(value) - set(RESOURCES))
        if unknown:
            raise serializers.ValidationError(f"unknown resource(s) {', '.join(unknown)}; use {', '.join(RESOURCES)}")
        if not any(value.values()):  # ({} or all zero: it would hold nothing and never be preempted)
            raise serializers.ValidationError(f"asks for no resources; give at least one of {', '.join(RESOURCES)} "
                                              "above 0 (e.g. gpu)")
        return value

    def validate_command(self, value: list[str]) -> list[str]:
        """Work runs a command on its nodes: an empty one is refused (a what-if needs none)."""
        if not value and not self.context.get("what_if"):
            raise serializers.ValidationError("a command to run is required (argv, a non-empty list)")
        return value

    def admission_errors(self, attrs: dict[str, Any], tenant: Any, vc: VCluster | None,
                         st: SessionType | None, klass: int, summary: list[dict[str, Any]] | None) -> dict[str, str]:
        """What could never run well: a start frame the protocol cannot carry, work no node could
        hold (``summary``: the group's nodes, when read with the vCluster), and escaping preemption
        without leave (admission_checks)."""
        escaped = session_type_escapes(attrs, st)
        own_only = (not escaped["preemptible"] or attrs["sensitive"] or klass == 10
                    or (klass >= 7 and attrs["checkpoint"] == Checkpoint.NONE)
                    or (vc is not None and vc.type == "sensitive"))
        env = attrs["env"]
        if attrs.get("array") is not None:  # each task's start frame carries its array's id and index too
            env = {**env, "LATTICE_ARRAY_ID": "9" * 20, "LATTICE_ARRAY_INDEX": str(10 * MAX_ARRAY_INDEX)}
        return {**start_frame_errors(attrs["command"], env),
                **never_fits_errors(attrs["resource_group"], vc, attrs["per_node"], attrs["nodes"],
                                    own_only=own_only, summary=summary),
                **constraint_errors(attrs["resource_group"], vc, attrs["per_node"], attrs["nodes"],
                                    attrs.get("constraints") or {}, own_only=own_only, summary=summary),
                **escape_errors(attrs, getattr(tenant, "quota", None), st)}

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        user = self.context["request"].user
        try:
            membership = membership_for(user, attrs.get("tenant"))
        except DomainError as exc:
            raise serializers.ValidationError({"tenant": exc.message}) from None
        tenant = membership.tenant
        group = attrs.get("resource_group") or getattr(getattr(tenant, "quota", None), "default_resource_group", None)
        if group is None:
            raise serializers.ValidationError({"resource_group": "name a resource group (the tenant has no default)"})
        attrs["resource_group"] = group
        errors: dict[str, str] = {}
        if attrs["depends_on"]:
            problem = dependency_errors(tenant, attrs["depends_on"])
            if problem:
                errors["depends_on"] = problem
        vc = st = summary = None
        if attrs.get("vcluster"):  # its nodes read with it (admission_errors counts them)
            vc, summary = vcluster_and_nodes(group.pk, attrs["vcluster"], tenant.pk, needs(attrs["per_node"]))
            if vc is None:
                errors["vcluster"] = f"no vCluster {attrs['vcluster']!r} in {group.name}"
            elif vc.restricted and not vc.admitted:  # type: ignore[attr-defined]
                errors["vcluster"] = f"tenant {tenant.name} may not use vCluster {vc.name}"
        if attrs.get("session_type"):
            st = SessionType.objects.filter(resource_group=group, name=attrs["session_type"]).first()
            if st is None:
                errors["session_type"] = f"no session type {attrs['session_type']!r} in {group.name}"
        klass = attrs.get("preemption_class", st.default_class if st is not None else 0)
        quota = getattr(tenant, "quota", None)
        if quota is not None and klass > quota.max_preemption_class:
            errors["preemption_class"] = (f"{klass} is above the tenant's max_preemption_class "
                                          f"{quota.max_preemption_class}")
        try:
            attrs["priority"] = priority_for(tenant, user, attrs.get("priority"), membership)
        except DomainError as exc:
            errors["priority"] = exc.message
        if attrs.get("rank") is not None:
            low, high = st.rank_range() if st is not None else (1, 1)
            if not low <= attrs["rank"] <= high:
                where = f"session type {st.name}" if st is not None else "work without a session type"
                errors["rank"] = f"{attrs['rank']} is outside the ranks {low}..{high} allowed for {where}"
        if attrs["sensitive"] and not (vc is not None and vc.type == "sensitive") and klass != 10:
            errors["sensitive"] = "sensitive work runs at class 10 or in a sensitive vCluster"
        if not errors:
            errors.update(self.admission_errors(attrs, tenant, vc, st, klass, summary))
        if errors:
            raise serializers.ValidationError(errors)
        attrs["tenant_obj"], attrs["vcluster_obj"], attrs["session_type_obj"] = tenant, vc, st
        attrs["preemption_class"] = klass
        return attrs

    def model_fields(self) -> dict[str, Any]:
        d = session_type_escapes(self.validated_data, self.validated_data["session_type_obj"])
        per_node = d["per_node"]
        constraints = dict(d.get("constraints") or {})
        return {
            "name": d["name"], "vcluster": d["vcluster_obj"], "session_type": d["session_type_obj"],
            "node_count": d["nodes"], **{f"per_node_{r}": per_node.get(r, 0) for r in RESOURCES},
            "preemption_class": d["preemption_class"], "priority": d["priority"], "checkpoint": d["checkpoint"],
            "checkpoint_minutes": d["checkpoint_minutes"], "walltime_minutes": d["walltime_minutes"],
            "sensitive": d["sensitive"], "preemptible": d["preemptible"], "exclusive": d["exclusive"],
            "forced": d["forced"], "backfill": d["backfill"], "constraints": constraints, "value": d["value"],
            "preemptive": d["preemptive"], "rank": d.get("rank"), "command": d["command"], "env": d["env"],
            "requeue_policy": d["requeue_policy"], "max_requeue": d["max_requeue"],
            "held": d["held"], "held_by": HeldBy.USER if d["held"] else HeldBy.NONE,
            "depends_on": [{"type": x["type"], "job": x["job"]} for x in d["depends_on"]],
            "dependency": DependencyStatus.WAITING if d["depends_on"] else DependencyStatus.NONE,
            "kill_on_invalid_dep": d["kill_on_invalid_dep"],
        }

    def array_spec(self) -> tuple[str, list[int], int | None] | None:
        """The array asked for (spec, indices, throttle), or None for a single job."""
        spec = self.validated_data.get("array")
        if spec is None:
            return None
        indices, throttle = parse_array(spec)
        return spec, indices, throttle


class AllocationOutput(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.name")
    user = serializers.CharField(source="user.username")
    resource_group = serializers.CharField(source="resource_group.name")
    vcluster = serializers.CharField(source="vcluster.name", allow_null=True, default=None)
    session_type = serializers.CharField(source="session_type.name", allow_null=True, default=None)
    nodes = serializers.IntegerField(source="node_count")
    per_node = serializers.DictField(read_only=True)
    array = serializers.IntegerField(source="array.id", allow_null=True, default=None,
                                     help_text="The array this task belongs to (null: a single job).")

    class Meta:
        model = Allocation
        fields = ["id", "name", "tenant", "user", "resource_group", "vcluster", "session_type", "state", "nodes",
                  "per_node", "preemption_class", "priority", "checkpoint", "checkpoint_minutes",
                  "walltime_minutes", "sensitive", "preemptible", "exclusive", "constraints", "value",
                  "preemptive", "rank", "command", "env", "requeue_policy", "max_requeue", "requeue_count",
                  "preempted_count", "resume_from_checkpoint", "protected_until", "submitted_at", "started_at",
                  "ended_at", "exit_code", "held", "held_by", "depends_on", "dependency", "kill_on_invalid_dep",
                  "array", "array_index"]
        read_only_fields = fields

    RELATED = {"tenant": "name", "user": "username", "resource_group": "name", "vcluster": "name",
               "session_type": "name", "array": "id"}

    @classmethod
    def columns(cls) -> list[str]:
        """The columns the output reads, for ``only()``: a page of 50 then neither decodes each
        resource group's policy nor reads each user's password hash, nor any column of the
        lifecycle that the output leaves out."""
        out = ["node_count", *(f"per_node_{r}" for r in RESOURCES)]  # nodes, per_node
        for name in cls.Meta.fields:
            if name in cls.RELATED:
                out.append(f"{name}__{cls.RELATED[name]}")
            elif name not in ("nodes", "per_node"):
                out.append(name)
        return out

    def to_representation(self, instance: Allocation) -> dict[str, Any]:
        """The declared fields, written out by hand (for a page of 50 allocations the generic field
        machinery cost more than the query): the row of ``columns()`` read off the instance, then
        ``from_row``, the one place the output is shaped. A test holds it equal to the generic one."""
        row: dict[str, Any] = {}
        for column in self.columns():
            name, _, attr = column.partition("__")
            value = getattr(instance, name)
            row[column] = (getattr(value, attr) if value is not None else None) if attr else value
        return self.from_row(row)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> dict[str, Any]:
        """The output from a row of ``values(*columns())``: a list page builds no model instances
        (six per allocation with its related rows)."""
        out: dict[str, Any] = {}
        for name in cls.Meta.fields:
            if name in cls.RELATED:
                out[name] = row[f"{name}__{cls.RELATED[name]}"]
            elif name == "nodes":
                out[name] = row["node_count"]
            elif name == "per_node":
                out[name] = {r: float(row[f"per_node_{r}"]) for r in RESOURCES if row[f"per_node_{r}"]}
            else:
                value = row[name]
                out[name] = _iso(value) if isinstance(value, datetime) else value
        return out

    def generic_representation(self, instance: Allocation) -> dict[str, Any]:
        return dict(super().to_representation(instance))


def _iso(value: datetime) -> str:
    """As DRF's DateTimeField writes it: in the current time zone, UTC as 'Z'."""
    text = timezone.localtime(value).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


class EventOutput(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor.username", allow_null=True, default=None)

    class Meta:
        model = AllocationEvent
        fields = ["id", "created_at", "from_state", "to_state", "reason", "decision", "actor"]
        read_only_fields = fields


class DecisionOutput(serializers.Serializer):
    """A decision record as the reader may see it (tenants: other tenants' work by class only)."""

    id = serializers.IntegerField()
    resource_group = serializers.CharField()
    created_at = serializers.DateTimeField()
    decided_for = serializers.DateTimeField()
    outcome = serializers.CharField()
    code = serializers.CharField()
    trigger = serializers.CharField(allow_null=True)
    nodes = serializers.ListField(child=serializers.CharField())
    borrowed = serializers.ListField(child=serializers.CharField())
    execution = serializers.CharField()
    preemptor = serializers.IntegerField(allow_null=True, help_text=(
        "The preemptor's allocation id; null when the reader may not see it (another tenant's work)."))
    preemptor_description = serializers.CharField(allow_null=True, help_text=(
        "Null when the id is shown; else what the reader may know of it: 'a class-5 allocation of another tenant'."))
    victims = serializers.ListField(child=serializers.DictField(), help_text=(
        "Each with its allocation id (an integer; null for another tenant's work), reason and action."))
    candidates = serializers.ListField(child=serializers.DictField(), required=False,
                                       help_text="Detail only: lists leave candidates out.")
    explanation = serializers.CharField()

"""Change rows name the allocations they are about, so that a kept snapshot can reload just
those after someone else's write (an agent's report, a cancel) instead of the whole group."""

import importlib

from django.db import migrations, models

HOLDING = "('running', 'checkpointing', 'terminating')"
NOTE = ("INSERT INTO scheduling_snapshotchange (group_id, xid, writer, created_at, allocations) "
        "SELECT {group}, pg_current_xact_id()::text::bigint, coalesce(current_setting('lattice.writer', true), ''), "
        "now(), jsonb_agg(DISTINCT {ident}) FROM {rows} {where} GROUP BY {group}")

FUNCTIONS = {
    "lattice_alloc_changed": f"""
        IF TG_OP = 'UPDATE' THEN
            {NOTE.format(group="n.resource_group_id", ident="n.id", rows="new_rows n JOIN old_rows o ON o.id = n.id",
                         where=f"WHERE o.state IN {HOLDING} OR n.state IN {HOLDING}")};
        ELSIF TG_OP = 'INSERT' THEN
            {NOTE.format(group="n.resource_group_id", ident="n.id", rows="new_rows n",
                         where=f"WHERE n.state IN {HOLDING}")};
        ELSE
            {NOTE.format(group="o.resource_group_id", ident="o.id", rows="old_rows o",
                         where=f"WHERE o.state IN {HOLDING}")};
        END IF;""",
    "lattice_placement_changed": f"""
        IF TG_OP = 'DELETE' THEN
            {NOTE.format(group="nd.resource_group_id", ident="p.allocation_id",
                         rows="old_rows p JOIN nodes_node nd ON nd.id = p.node_id", where="")};
        ELSE
            {NOTE.format(group="nd.resource_group_id", ident="p.allocation_id",
                         rows="new_rows p JOIN nodes_node nd ON nd.id = p.node_id", where="")};
        END IF;""",
}


def _replace(schema_editor, functions):
    with schema_editor.connection.cursor() as cur:
        for name, body in functions.items():
            cur.execute(f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ "
                        f"BEGIN {body} RETURN NULL; END $$")


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        _replace(schema_editor, FUNCTIONS)


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        _replace(schema_editor, importlib.import_module("scheduling.migrations.0005_snapshot_changes").FUNCTIONS)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0007_decision_json_per_row"),
    ]

    operations = [
        migrations.AddField(
            model_name="snapshotchange",
            name="allocations",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.RunPython(install, uninstall),
    ]

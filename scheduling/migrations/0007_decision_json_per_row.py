"""Decision records' JSON columns become RecordJSONField: the same jsonb column, written per row
in bulk inserts. Nothing changes in the database, so the change is to the model state only
(SQLite would otherwise copy the whole table for each field)."""

from django.db import migrations

import scheduling.models.fields


def _per_row(name, default):
    return migrations.AlterField(model_name="preemptiondecision", name=name,
                                 field=scheduling.models.fields.RecordJSONField(default=default))


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0006_snapshotchange_xid_index"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[_per_row("borrowed", list), _per_row("candidates", list), _per_row("nodes", list),
                              _per_row("policy_snapshot", dict), _per_row("victims", list)],
        ),
    ]

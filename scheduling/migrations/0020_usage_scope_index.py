from django.db import migrations, models


class Migration(migrations.Migration):
    """A chart reads one scope's rows over a range: by scope, id and start, so the read costs the
    rows it returns, not the number of tenants, vClusters and groups stored beside them."""

    dependencies = [
        ("scheduling", "0019_policy_evaluations"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="usagesample",
            index=models.Index(fields=["scope", "scope_id", "start"], name="usage_scope_start_idx"),
        ),
    ]

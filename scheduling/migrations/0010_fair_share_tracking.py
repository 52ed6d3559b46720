# Fair-share starvation tracked per (tenant, resource group), written by the pass; a vCluster's
# allow_aggressive_preemption. The tenant-wide below_fair_share_since it replaces was never written.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0009_field_validators'),
    ]

    operations = [
        migrations.RemoveField(
            model_name='tenant',
            name='below_fair_share_since',
        ),
        migrations.AddField(
            model_name='vcluster',
            name='allow_aggressive_preemption',
            field=models.BooleanField(default=True, help_text='fair_share: its work in the aggressive-only band may be taken by an aggressively starving tenant.'),
        ),
        migrations.CreateModel(
            name='TenantShare',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('share', models.FloatField(default=0.0)),
                ('fair_share', models.FloatField(default=0.0)),
                ('below_since', models.DateTimeField(blank=True, null=True)),
                ('updated_at', models.DateTimeField()),
                ('resource_group', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='tenant_shares', to='scheduling.resourcegroup')),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='shares', to='scheduling.tenant')),
            ],
            options={
                'ordering': ['resource_group_id', 'tenant__name'],
                'constraints': [models.UniqueConstraint(fields=('tenant', 'resource_group'), name='tenantshare_unique')],
            },
        ),
    ]

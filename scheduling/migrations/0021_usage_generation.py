from django.db import migrations

GENERATION = "usage:generation"

# Statement-level: one upsert per statement that writes the series, whatever its rows. The value
# is the next of a sequence, so no generation is ever seen twice (a number a rolled-back
# transaction took is not given again; each statement of one transaction takes its own), and
# it becomes visible with the rows, at the commit (writers wait for each other on the row).
SEQUENCE = "CREATE SEQUENCE IF NOT EXISTS lattice_usage_generation"
FUNCTION = f"""CREATE OR REPLACE FUNCTION lattice_usage_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO scheduling_metricrollup (key, value) VALUES ('{GENERATION}', nextval('lattice_usage_generation'))
    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value;
    RETURN NULL;
END $$"""
TRIGGER = ("CREATE TRIGGER scheduling_usagesample_written AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE "
           "ON scheduling_usagesample FOR EACH STATEMENT EXECUTE FUNCTION lattice_usage_written()")


def install(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return  # SQLite (the embedded mode) reads the series afresh each time
    with schema_editor.connection.cursor() as cur:
        cur.execute(SEQUENCE)
        cur.execute(FUNCTION)
        cur.execute(TRIGGER)


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cur:
        cur.execute("DROP TRIGGER IF EXISTS scheduling_usagesample_written ON scheduling_usagesample")
        cur.execute("DROP FUNCTION IF EXISTS lattice_usage_written()")
        cur.execute("DROP SEQUENCE IF EXISTS lattice_usage_generation")
        cur.execute("DELETE FROM scheduling_metricrollup WHERE key = %s", [GENERATION])


class Migration(migrations.Migration):
    """Every write to the usage series, by any path (the sampler, the folding, SQL), sets the
    series' generation: a chart's answer cached under the generation it was read at is served
    only while nothing has been written since (scheduling/usage_series.py)."""

    dependencies = [
        ("scheduling", "0020_usage_scope_index"),
    ]

    operations = [migrations.RunPython(install, uninstall)]

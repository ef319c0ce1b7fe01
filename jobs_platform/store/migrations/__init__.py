"""Alembic scripts of the framework's own tables (`jp_*`); run by `jobs-platform db upgrade`.

`jobs_platform.store.migrate` drives them; `versions/` holds one file per schema change,
the first being the schema as 0.1.0 shipped it. A change to `jobs_platform.store.schema`
needs a new revision here: the suite compares the migrated database with the metadata.
To draft one against a scratch database at head, then edit it by hand:

    from alembic import command
    from jobs_platform.store.migrate import alembic_config
    command.revision(alembic_config(URL), message="…", autogenerate=True, rev_id="0003_…")
"""

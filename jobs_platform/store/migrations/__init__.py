"""Alembic scripts of the framework's own tables (`jp_*`); run by `jobs-platform db upgrade`.

`jobs_platform.store.migrate` drives them; `versions/` holds one file per schema change,
the first being the schema as 0.1.0 shipped it. A change to `jobs_platform.store.schema`
needs a new revision here: the suite compares the migrated database with the metadata.
"""

"""The writer: a user's rows into the warehouse, and the rows it rejects. No Dagster.

`upsert` merges a chunk by its key (over `copy`, the COPY paths); `sweep` deletes the rows
no longer in a partition's input; the rest is about bad rows (`bad_rows=RejectRows(...)`).
"""

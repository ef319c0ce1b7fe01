"""The partition attempt: gate, lease, chunks, finalize. Plain Python, no Dagster."""

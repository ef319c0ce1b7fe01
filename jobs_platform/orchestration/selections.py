"""Asset selections the sensors and the health figures share."""

import dagster as dg

from jobs_platform.orchestration.tags import BACKFILL_TAG

BACKFILL_ASSETS = dg.AssetSelection.tag(BACKFILL_TAG, "true")
"""Every asset `backfill_asset` declared in the code location."""


def served_backfills(repository: dg.RepositoryDefinition | None) -> list[str]:
    """The backfills a code location serves, as the keys' user strings, sorted.

    What its sensors act on: several locations may share one warehouse, and each acts
    only on its own backfills' rows (dead-letter entries, requeues, attempts).
    """
    if repository is None:
        return []
    return sorted(key.to_user_string() for key in BACKFILL_ASSETS.resolve(repository.asset_graph))


def served_assets(repository: dg.RepositoryDefinition | None) -> list[str]:
    """Every asset a code location materializes, as the keys' user strings, sorted.

    The outbox requests it claims: a request for another of its assets is its own to
    reject ("not a backfill"); a request for an asset it does not have is left to the
    location that serves it.
    """
    if repository is None:
        return []
    graph = repository.asset_graph
    return sorted(key.to_user_string() for key in graph.materializable_asset_keys)


def with_downstream_backfills(graph, asset: dg.AssetKey) -> list[dg.AssetKey]:
    """What a run of `asset` for some partitions selects: it and the backfills it feeds,
    partitioned like it, so that each good partition's downstream is computed with it
    (those partitioned differently are relaunched once it is done: `upstream`).

    The same for a requeue (`requeue_sensor`, `jobs-platform dead-letter requeue`) and an
    outbox request (`backfill_request_sensor`).
    """
    from jobs_platform.orchestration.upstream import is_backfill, reads_alike

    partitions_def = graph.get(asset).partitions_def
    downstream = sorted(
        child
        for child in graph.get(asset).child_keys
        if is_backfill(graph, child)
        and reads_alike(
            graph.get(child).partitions_def,
            partitions_def,
            graph.get(child).partition_mappings.get(asset),
        )
    )
    return [asset, *downstream]

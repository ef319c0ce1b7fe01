"""`platform_health`: the status figures as an asset in the UI, with checks on them, and
the location's dead letter by cause (the table of `jobs-platform dead-letter groups`)."""

from collections.abc import Iterable, Sequence

import dagster as dg

from jobs_platform.dead_letter.triage import signature_groups
from jobs_platform.dead_letter.view import groups_markdown
from jobs_platform.engine.warehouse import ready_store
from jobs_platform.orchestration.catalog import expected_keys, write_location_catalog
from jobs_platform.orchestration.naming import BARE, FrameworkNames
from jobs_platform.orchestration.origins import location_of_run
from jobs_platform.orchestration.tags import BACKFILL_TAG
from jobs_platform.orchestration.windows import StatusWindow, keys_in_window
from jobs_platform.steering.circuit_report import circuits_report, open_circuits
from jobs_platform.steering.estimate import backfill_progress
from jobs_platform.steering.holds import steering_status
from jobs_platform.steering.pauses import describe_pause
from jobs_platform.store.health import AssetHealth, ExpectedKeys
from jobs_platform.store.migrate import ready_warehouse


def backfill_partition_keys(
    specs: Iterable[dg.AssetSpec], instance: dg.DagsterInstance
) -> dict[str, list[str]]:
    """Every partition key each backfill asset among `specs` should have, as of now."""
    keys = {}
    for spec in specs:
        if spec.tags.get(BACKFILL_TAG) != "true" or spec.partitions_def is None:
            continue
        keys[spec.key.to_user_string()] = list(
            spec.partitions_def.get_partition_keys(dynamic_partitions_store=instance)
        )
    return keys


def backfill_expected_keys(
    specs: Iterable[dg.AssetSpec], instance: dg.DagsterInstance
) -> dict[str, ExpectedKeys]:
    """What each backfill asset among `specs` should have as of now: a time-window
    backfill's window (`catalog.key_window`: no key listed, whatever its length), else
    every key. What `status` and `/metrics` count `missing` against."""
    return {
        spec.key.to_user_string(): expected_keys(spec.partitions_def, instance)
        for spec in specs
        if spec.tags.get(BACKFILL_TAG) == "true" and spec.partitions_def is not None
    }


def status_report(
    specs: Iterable[dg.AssetSpec],
    instance: dg.DagsterInstance,
    settings,
    window: StatusWindow | None = None,
) -> dict:
    """The figures of `jobs-platform status` and of the `platform_health` asset.

    Of the backfills among `specs` (a code location's) only, outbox requests included:
    other locations sharing the warehouse report theirs. With a `window`, each
    time-partitioned backfill counts only its partitions in it (`windows`), and the
    others are named under `not_windowed`.
    """
    specs = list(specs)
    store = ready_store(settings.database_url)
    if window is None:
        with store.connect() as connection:
            report = store.health.backfill_status(
                connection, backfill_expected_keys(specs, instance)
            )
            report["steering"] = steering_status(connection, report["assets"])
            report["circuits"] = circuits_report(connection, list(report["assets"]))
            return report
    keys = backfill_partition_keys(specs, instance)
    windowed = keys_in_window(specs, keys, window)
    with store.connect() as connection:
        assets = store.health.window_health(connection, windowed)
        queue = store.outbox_backlog.queue_stats(connection, assets=list(keys))
        steering = steering_status(connection, assets)
        circuits = circuits_report(connection, list(keys))
    return {
        "assets": assets,
        "steering": steering,
        "oldest_pending_request_age_seconds": queue.oldest_pending_age_seconds,
        "pending_requests": queue.pending,
        "window": window.as_dict(),
        "not_windowed": [asset for asset in keys if asset not in windowed],
        "circuits": circuits,
    }


def _health_metadata(report: dict) -> dict:
    metadata: dict = {
        "oldest_pending_request_age_seconds": report["oldest_pending_request_age_seconds"] or 0.0,
        "pending_requests": report["pending_requests"],
    }
    health: AssetHealth
    for asset, health in report["assets"].items():
        for field, value in vars(health).items():
            if value is not None:
                metadata[f"{asset}/{field}"] = value
    for asset, steering in report.get("steering", {}).items():
        metadata[f"{asset}/paused"] = describe_pause(steering["paused"])
        for reason, held in steering["held"].items():
            metadata[f"{asset}/held_{reason}"] = held
        metadata[f"{asset}/not_ready_past_max_wait"] = steering["not_ready_past_max_wait"]
    # Done / remaining / failing and the ETA, from the same history as `plan`'s estimate.
    going = backfill_progress(report["assets"], report.get("partitions_per_run", {}))
    for asset, progress in going.items():
        for field, value in progress.as_dict().items():
            if value is not None:
                metadata[f"{asset}/progress_{field}"] = value
    for asset in report["assets"]:
        circuits = report.get("circuits", {}).get(asset, [])
        metadata[f"{asset}/circuits_open"] = len(circuits)
        if circuits:
            metadata[f"{asset}/circuits"] = dg.MetadataValue.json(circuits)
    return metadata


PLATFORM_HEALTH = "platform_health"


def partitions_per_run_of(assets: Iterable[object]) -> dict[str, int | None]:
    """Each asset's run size as its backfill policy bounds it, for the ETA's runs at once:
    as the catalog keeps it (`store.catalog`), so that `status` says the same from either.
    None is `single_run()` or no policy, both counted as one run at once."""
    return {
        spec.key.to_user_string(): (
            assets_def.backfill_policy.max_partitions_per_run
            if assets_def.backfill_policy is not None
            else None
        )
        for assets_def in assets
        if isinstance(assets_def, dg.AssetsDefinition)
        for spec in assets_def.specs
    }


def platform_health_asset(
    backfills: Sequence[dg.AssetsDefinition], names: FrameworkNames = BARE
) -> dg.AssetsDefinition:
    """The `platform_health` asset over `backfills`.

    The code location passes its backfills in, as it does to the quarantine checks: the
    asset must not import the code location, which imports it.
    """
    specs = [spec for assets_def in backfills for spec in assets_def.specs]
    key = names.asset_key(PLATFORM_HEALTH)

    @dg.asset(
        key=key,
        group_name="platform",
        required_resource_keys={"jobs_platform"},
        check_specs=[
            dg.AssetCheckSpec("nothing_quarantined", asset=key),
            dg.AssetCheckSpec("no_lease_older_than_its_ttl", asset=key),
        ],
        description="Partitions done / failed / quarantined / missing per backfill, in-flight "
        "work, pending requests and speed. Materialize it (or let its schedule) to refresh; "
        "it rewrites the backfill catalog `jobs-platform status` reads too.",
    )
    def platform_health(context: dg.AssetExecutionContext):
        settings = context.resources.jobs_platform.settings()
        report = status_report(specs, context.instance, settings)
        report["partitions_per_run"] = partitions_per_run_of(backfills)
        location = location_of_run(context.run)
        # The catalog `jobs-platform status -m` answers from, refreshed with the figures;
        # a run whose location nothing names has no catalog to refresh.
        if location is not None:
            write_location_catalog(
                ready_store(settings.database_url), location, backfills, context.instance
            )
        causes = dead_letter_causes(specs, settings, location)
        yield from _health_results(report, causes)

    return platform_health


def dead_letter_causes(specs: Sequence[dg.AssetSpec], settings, module: str | None) -> dict:
    """The `dead-letter groups` table of the location's own backfills, for the UI: markdown,
    each cause with the command that requeues it in `module`, and the number of causes."""
    backfills = [
        spec.key.to_user_string() for spec in specs if spec.tags.get(BACKFILL_TAG) == "true"
    ]
    with ready_warehouse(settings.database_url).connect() as connection:
        groups = signature_groups(connection, assets=backfills)
        circuits = open_circuits(connection, backfills)
    # An outage's failures snooze instead of reaching the dead letter: say so above it.
    opened = [
        f"**Circuit open** for cause `{circuit.signature}` on {circuit.asset} since "
        f"{circuit.opened_at.isoformat()} ({circuit.partitions} partitions failed): its "
        "partitions snooze, spending nothing, until a probe succeeds.\n"
        for circuit in circuits
    ]
    markdown = "\n".join([*opened, groups_markdown(groups, module)])
    return {
        "dead_letter_causes": len(groups),
        "dead_letter_groups": dg.MetadataValue.md(markdown),
    }


def _health_results(report: dict, causes: dict):
    assets = report["assets"]
    quarantined = {name: h.quarantined for name, h in assets.items() if h.quarantined}
    expired = {name: h.expired_leases for name, h in assets.items() if h.expired_leases}
    yield dg.MaterializeResult(metadata={**_health_metadata(report), **causes})
    yield dg.AssetCheckResult(
        check_name="nothing_quarantined",
        passed=not quarantined,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"quarantined": str(quarantined or "none")},
    )
    yield dg.AssetCheckResult(
        check_name="no_lease_older_than_its_ttl",
        passed=not expired,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"expired_leases": str(expired or "none")},
    )


def platform_health_schedule(
    backfill_checks: list[dg.AssetChecksDefinition], names: FrameworkNames = BARE
) -> dg.ScheduleDefinition:
    """Refresh platform_health every 10 minutes, with the backfills' quarantine checks.

    The checks ride along here rather than in every partition's run, where each would add
    a step (a process) per partition.
    """
    return dg.ScheduleDefinition(
        name=names.definition("platform_health_every_10_minutes"),
        target=dg.AssetSelection.assets(names.asset_key(PLATFORM_HEALTH))
        | dg.AssetSelection.checks(*backfill_checks),
        cron_schedule="*/10 * * * *",
        # On by default: a backfill's own runs skip its quarantine checks when a partition
        # fails (a failed step skips its checks), so without this tick the checks would
        # show "Execution failed" instead of what is quarantined.
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Refreshes the platform_health figures and the quarantine checks.",
    )

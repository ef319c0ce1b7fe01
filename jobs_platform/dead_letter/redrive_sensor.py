"""The dead letter heals itself: `dead_letter_redrive_sensor` requeues entries whose cause is gone.

Each tick asks the store (`dead_letter/redrive.py`, where the rules and their SQL live) for the
open entries of this location's backfills that

- ran another `code_version` than the backfill's now (`code_changed`),
- read another input than the partition's now (`input_changed`: the backfill's
  `fingerprint=` computed again, with its resources bound as a step binds them), or
- used up their attempts on an outage and have waited out their cool-down (`cooldown`),

and releases them with `release_entries(..., by=RequeuedBy.REDRIVE, reason=...)`; the
requeue sensor then launches their runs, as for a person's requeue from the UI. An entry
whose partition has had `max_redrives` redrives is never released again: it is alerted
once more (a second event in the alert ledger) and waits for a person. Backfills declared
with `redrive=False`, and other locations' backfills, are left alone.

What a tick costs is bounded whatever the dead letter holds: each question is one query
with a LIMIT (`REDRIVES_PER_TICK` per reason, `EXHAUSTED_ALERTS_PER_TICK`), and input
fingerprints (a file hash each) are computed for at most `FINGERPRINTS_PER_TICK` entries
within `FINGERPRINT_BUDGET_SECONDS`, walking the entries round-robin by id (the cursor).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
import sqlalchemy as sa

from jobs_platform.alerts.alert import alert_for_entry
from jobs_platform.alerts.ledger import deliver_all
from jobs_platform.alerts.resource import AlertsResource
from jobs_platform.dead_letter import redrive as redrive_rules
from jobs_platform.dead_letter.redrive import EXHAUSTED_EVENT, RedriveReason
from jobs_platform.dead_letter.releases import RequeuedBy
from jobs_platform.engine.spec import DEFAULT_CHUNK_ROWS, BackfillSpec, PartitionInput
from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.orchestration.backfill_asset import declared_config, resource_parameters
from jobs_platform.orchestration.naming import BARE, FrameworkNames
from jobs_platform.orchestration.origins import location_of_sensor
from jobs_platform.orchestration.resources import JobsPlatformResource
from jobs_platform.orchestration.selections import served_backfills
from jobs_platform.orchestration.specs import backfill_specs
from jobs_platform.settings import Settings
from jobs_platform.store.rows import TableRow

# A redrive answers a fix or an outage's end: a minute's delay is nothing next to the
# cool-downs (15 min and more), and a tick a minute keeps fingerprinting cheap.
REDRIVE_TICK_SECONDS = 60
REDRIVES_PER_TICK = 100  # per reason; the requeue sensor launches them 100 at a time too
FINGERPRINTS_PER_TICK = 200  # a 10,000-entry dead letter is judged by input every ~50 ticks
# Within Dagster's 60 s sensor timeout with room for the rest of the tick and the alerts.
FINGERPRINT_BUDGET_SECONDS = 10.0
EXHAUSTED_ALERTS_PER_TICK = 20
ALERT_BUDGET_SECONDS = 15.0  # how long each sink starts sends (`deliver_all`)

log = logging.getLogger("jobs_platform.redrive")


@dataclass(frozen=True)
class RedriveCursor:
    """Where the round-robin walk of fingerprinted entries stands: the last entry judged by
    its input. Serialized as the bare id, so a person can reset it in the UI."""

    fingerprinted_after: int = 0

    @classmethod
    def parse(cls, raw: str | None) -> RedriveCursor:
        return cls(int(raw)) if raw and raw.strip().isdigit() else cls()

    def serialize(self) -> str:
        return str(self.fingerprinted_after)


@dataclass(frozen=True)
class Redrive:
    """One entry to release, and why."""

    entry: TableRow
    reason: RedriveReason


@functools.cache
def redrive_sensor_named(names: FrameworkNames = BARE) -> dg.SensorDefinition:
    """The redrive sensor under one code location's names."""

    @dg.sensor(
        name=names.definition("dead_letter_redrive_sensor"),
        minimum_interval_seconds=REDRIVE_TICK_SECONDS,
        # On by default: the dead letter heals itself without anyone starting a sensor
        # (JOBS_PLATFORM_MAX_REDRIVES=0 or redrive=False turn it off).
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Requeues dead-letter entries of this code location's backfills whose "
        "cause is gone (code_changed, input_changed, cooldown), at most "
        "JOBS_PLATFORM_MAX_REDRIVES times per partition; then alerts once more.",
    )
    def dead_letter_redrive_sensor(
        context: dg.SensorEvaluationContext,
        jobs_platform: JobsPlatformResource,
        alerts: AlertsResource,
    ) -> dg.SensorResult:
        return redrive_tick(context, jobs_platform, alerts)

    return dead_letter_redrive_sensor


def redrive_tick(
    context: dg.SensorEvaluationContext,
    jobs_platform: JobsPlatformResource,
    alerts: AlertsResource,
) -> dg.SensorResult:
    """One tick: release what can be redriven, alert what ran out, move the cursor."""
    specs = redriven_backfills(context.repository_def)
    settings = jobs_platform.settings()
    if not specs:
        return dg.SensorResult(skip_reason="no backfill of this code location is redriven")
    if settings.max_redrives < 1:
        return dg.SensorResult(skip_reason="JOBS_PLATFORM_MAX_REDRIVES is 0: the redrive is off")
    cursor = RedriveCursor.parse(context.cursor)
    store = jobs_platform.ready_store()
    with bound_fingerprints(
        specs, context.repository_def, context.log, context.instance
    ) as fingerprints:
        redrives, walked_to = find_redrives(
            store, specs, settings, cursor, fingerprints, logger=context.log
        )
    released = release(store, redrives)
    for redrive in released:
        entry = redrive.entry
        context.log.info(
            f"redrove {entry.asset}/{entry.partition} (entry {entry.id}, {entry.error_class}): "
            f"{redrive.reason}"
        )
    alerted = alert_exhausted(context, store, alerts, settings, [spec.asset for spec in specs])
    # The sensor requests no run itself (the requeue sensor launches released entries), so
    # every tick is "skipped" in the UI: its message says what it did.
    return dg.SensorResult(
        cursor=RedriveCursor(walked_to).serialize(),
        skip_reason=tick_summary(released, alerted),
    )


def tick_summary(released: Sequence[Redrive], alerted: int) -> str:
    """What a tick did, as the UI shows it: `redrove 2 (input_changed 1, cooldown 1)`."""
    if not released and not alerted:
        return "no dead-letter entry whose cause is gone, none newly out of redrives"
    counts = {reason: sum(r.reason == reason for r in released) for reason in RedriveReason}
    by_reason = ", ".join(f"{reason} {count}" for reason, count in counts.items() if count)
    parts = [f"redrove {len(released)}" + (f" ({by_reason})" if by_reason else "")]
    if alerted:
        parts.append(f"alerted {alerted} out of redrives")
    return "; ".join(parts)


def redriven_backfills(repository: dg.RepositoryDefinition | None) -> list[BackfillSpec]:
    """The location's backfills whose entries the redrive may release (`redrive=True`)."""
    if repository is None:
        return []
    served = set(served_backfills(repository))
    specs = backfill_specs(repository.assets_defs_by_key.values())
    return [spec for name, spec in specs.items() if name in served and spec.redrive]


Fingerprints = Mapping[str, Callable[[PartitionInput], str]]


@contextlib.contextmanager
def bound_fingerprints(
    specs: Sequence[BackfillSpec],
    repository: dg.RepositoryDefinition | None,
    logger,
    instance: dg.DagsterInstance | None = None,
) -> Iterator[Fingerprints]:
    """Each backfill's `fingerprint=` with its resources bound, as a step binds them.

    The resources are the location's own (`get_top_level_resources`), built for the tick.
    A fingerprint that takes `config` depends on a run's config, which a sensor does not
    have: its backfill is not judged by input (said in the log).
    """
    wanted = {spec.asset: spec.fingerprint for spec in specs if spec.fingerprint is not None}
    for asset, fingerprint in list(wanted.items()):
        if declared_config(fingerprint) is not None:
            logger.info(f"{asset}: its fingerprint takes run config; not judged by input")
            del wanted[asset]
    needed = {name for fp in wanted.values() for name in resource_parameters(fp)}
    definitions = repository.get_top_level_resources() if repository is not None else {}
    missing = needed - set(definitions)
    for asset, fingerprint in list(wanted.items()):
        lacking = set(resource_parameters(fingerprint)) & missing
        if lacking:
            logger.warning(f"{asset}: resources {sorted(lacking)} not found; not judged by input")
            del wanted[asset]
    if not wanted:
        yield {}
        return
    present = {name: definitions[name] for name in needed & set(definitions)}
    # With the sensor's instance: without one Dagster makes an ephemeral instance per build
    # (a tenth of a second, most of a quiet tick).
    with dg.build_resources(present, instance=instance) as built:
        yield {
            asset: functools.partial(fp, **{n: getattr(built, n) for n in resource_parameters(fp)})
            for asset, fp in wanted.items()
        }


def find_redrives(
    store: Warehouse,
    specs: Sequence[BackfillSpec],
    settings: Settings,
    cursor: RedriveCursor,
    fingerprints: Fingerprints,
    *,
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger] | Any = log,
) -> tuple[list[Redrive], int]:
    """What to release this tick, one reason per entry (the first that holds of
    code_changed, input_changed, cooldown), and how far the input walk got."""
    assets = [spec.asset for spec in specs]
    found: dict[int, Redrive] = {}
    with store.connect() as connection:
        for spec in specs:
            for entry in redrive_rules.code_changed_entries(
                connection,
                spec.asset,
                spec.version,
                max_redrives=settings.max_redrives,
                limit=REDRIVES_PER_TICK,
            ):
                found.setdefault(entry.id, Redrive(entry, RedriveReason.CODE_CHANGED))
        page = redrive_rules.fingerprinted_entries(
            connection,
            [asset for asset in assets if asset in fingerprints],
            after_id=cursor.fingerprinted_after,
            max_redrives=settings.max_redrives,
            limit=FINGERPRINTS_PER_TICK,
        )
        cooled = store.redrives.cooldown_due_entries(
            connection,
            assets,
            first_cooldown_seconds=settings.redrive_cooldown_seconds,
            max_redrives=settings.max_redrives,
            limit=REDRIVES_PER_TICK,
        )
    # The file hashes run with no connection held (on SQLite one would block writers).
    by_asset = {spec.asset: spec for spec in specs}
    walked_to = cursor.fingerprinted_after
    deadline = time.monotonic() + FINGERPRINT_BUDGET_SECONDS
    for entry in page:
        if time.monotonic() > deadline:
            break  # the walk resumes here next tick
        walked_to = entry.id
        if entry.id in found:
            continue
        spec = by_asset[entry.asset]
        current = input_fingerprint(spec, fingerprints[entry.asset], entry, store.engine, logger)
        if current is not None and current != entry.fingerprint:
            found[entry.id] = Redrive(entry, RedriveReason.INPUT_CHANGED)
    else:
        if len(page) < FINGERPRINTS_PER_TICK:
            walked_to = 0  # the walk reached the end: start over next tick
    for entry in cooled:
        found.setdefault(entry.id, Redrive(entry, RedriveReason.COOLDOWN))
    return sorted(found.values(), key=lambda redrive: redrive.entry.id), walked_to


def input_fingerprint(
    spec: BackfillSpec,
    fingerprint: Callable[[PartitionInput], str],
    entry: TableRow,
    engine: sa.Engine,
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger] | Any = log,
) -> str | None:
    """The partition's input fingerprint now, in the form attempts keep it; None (logged)
    when it cannot be computed: the entry is then not judged by input this tick."""
    source = PartitionInput(
        asset=entry.asset,
        partition_key=entry.partition,
        chunk_rows=DEFAULT_CHUNK_ROWS,
        warehouse=engine,
        log=log,
    )
    try:
        return spec.stored_fingerprint(fingerprint(source))
    except Exception as error:
        logger.warning(
            f"{entry.asset}/{entry.partition} (entry {entry.id}): input fingerprint failed, "
            f"not judged by input this tick: {type(error).__name__}: {error}"
        )
        return None


def release(store: Warehouse, redrives: Sequence[Redrive]) -> list[Redrive]:
    """Release the entries, each with its reason, in one transaction; returns those
    released (one a person or another tick released meanwhile is left out)."""
    released: list[Redrive] = []
    with store.begin() as connection:
        for reason in RedriveReason:
            chosen = {r.entry.id: r for r in redrives if r.reason == reason}
            for entry in store.dead_letter.release_entries(
                connection,
                [r.entry for r in chosen.values()],
                by=RequeuedBy.REDRIVE,
                reason=str(reason),
            ):
                released.append(chosen[entry.id])
    return sorted(released, key=lambda redrive: redrive.entry.id)


def alert_exhausted(
    context: dg.SensorEvaluationContext,
    store: Warehouse,
    alerts: AlertsResource,
    settings: Settings,
    assets: Sequence[str],
) -> int:
    """Alert once more, through the ledger (once per sink), each open entry whose
    partition's redrives ran out; returns how many were alerted this tick."""
    sinks = alerts.sinks(settings)
    location = location_of_sensor(context)
    with store.connect() as connection:
        exhausted = redrive_rules.exhausted_entries_to_alert(
            connection,
            assets,
            max_redrives=settings.max_redrives,
            sinks=[sink.name for sink in sinks],
            limit=EXHAUSTED_ALERTS_PER_TICK,
            now=store.now(connection),
        )
        pending = [
            alert_for_entry(connection, entry, location).with_event(
                EXHAUSTED_EVENT, redrives=entry.redrives
            )
            for entry in exhausted
        ]
    # One worker per sink (`deliver_all`): a sink that is down delays no other.
    delivered = deliver_all(store, pending, sinks, budget_seconds=ALERT_BUDGET_SECONDS)
    for alert, statuses in zip(pending, delivered, strict=True):
        context.log.warning(
            f"{alert.asset}/{alert.partition} (entry {alert.entry_id}): redrives exhausted "
            f"after {alert.redrives}; waits for a person. Alerts: "
            f"{', '.join(f'{sink} {status}' for sink, status in statuses.items())}"
        )
    return len(pending)


dead_letter_redrive_sensor = redrive_sensor_named(BARE)

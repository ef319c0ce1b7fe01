"""The dead letter in Dagster: one `dead_letter` partition per dead-letter entry, and alerts.

`dead_letter_sensor` walks new dead-letter entries of its code location's backfills by id
(its cursor), alerts each once through the ledger and launches the entry's `dead_letter`
partition; entries of backfills other locations serve are theirs. The same tick delivers
the notices raised about its backfills (`alerts.notices`). Requeueing is in
`requeue.py`. `dead_letter_definitions(names)` builds the asset and the sensor under a
location's names (`naming.py`); `dead_letter` and `dead_letter_sensor` are the bare ones.
"""

import functools
import json
from dataclasses import dataclass

import dagster as dg

from jobs_platform.alerts.alert import QuarantineAlert, alert_for_entry, load_alert, load_alerts
from jobs_platform.alerts.deliveries import DeliveryStatus
from jobs_platform.alerts.ledger import deliver_all, is_settled
from jobs_platform.alerts.notices import due_notices
from jobs_platform.alerts.resource import AlertsResource
from jobs_platform.dead_letter.entries import UnknownEntry, entries_after
from jobs_platform.gate.reviews import latest_review, review_evidence
from jobs_platform.orchestration.naming import BARE, FrameworkNames
from jobs_platform.orchestration.origins import location_of_run, location_of_sensor
from jobs_platform.orchestration.resources import JobsPlatformResource
from jobs_platform.orchestration.selections import served_backfills

# A tick's sends are bounded by `alerts.ledger.deliver_all` (each sink's worker starts
# sends for 20 s, and rests after two failures in a row), well within Dagster's sensor
# timeout (60 s); what does not fit waits for the next tick.
ENTRIES_PER_TICK = 100
NOTICES_PER_TICK = 50
DEAD_LETTER_TICK_SECONDS = 30

HISTORY_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("episode", "int"),
        dg.TableColumn("attempt", "int"),
        dg.TableColumn("run_id", "string"),
        dg.TableColumn("error_class", "string"),
        dg.TableColumn("error_type", "string"),
        dg.TableColumn("message", "string"),
        dg.TableColumn("at", "string"),
        # The taught rule that decided the attempt's class (`dead-letter rules`), if any.
        dg.TableColumn("rule", "string"),
    ]
)


def dead_letter_metadata(alert: QuarantineAlert) -> dict:
    """What the UI shows for a dead-letter entry."""
    return {
        "entry_id": alert.entry_id,
        "asset": alert.asset,
        "partition": alert.partition,
        "status": alert.status,
        "attempts": alert.attempts,
        "error_class": alert.error_class,
        "last_error": alert.last_error or "",
        "first_failed_at": _timestamp(alert.first_failed_at),
        "last_failed_at": _timestamp(alert.last_failed_at),
        "requeue": alert.requeue_command,
        "history": dg.TableMetadataValue(
            records=[
                dg.TableRecord(
                    {
                        "episode": attempt.episode,
                        "attempt": attempt.attempt,
                        "run_id": attempt.run_id,
                        "error_class": attempt.error_class,
                        "error_type": attempt.error_type,
                        "message": attempt.message,
                        "at": attempt.at.isoformat() if attempt.at else None,
                        "rule": attempt.rule,
                    }
                )
                for attempt in alert.history
            ],
            schema=HISTORY_SCHEMA,
        ),
    }


@dataclass(frozen=True)
class DeadLetterCursor:
    """Where `dead_letter_sensor` stands: the last entry seen, and alerts still to retry.

    Serialized as the bare entry id ("17") when no alert waits for a retry, so a person
    can also set it in the UI.
    """

    last_entry_id: int = 0
    undelivered: tuple[int, ...] = ()

    @classmethod
    def parse(cls, raw: str | None) -> "DeadLetterCursor":
        if not raw or not raw.strip():
            return cls()
        if raw.strip().isdigit():
            return cls(int(raw))
        state = json.loads(raw)
        return cls(int(state["last_entry_id"]), tuple(int(i) for i in state["undelivered"]))

    def serialize(self) -> str:
        if not self.undelivered:
            return str(self.last_entry_id)
        return json.dumps(
            {"last_entry_id": self.last_entry_id, "undelivered": list(self.undelivered)}
        )


@functools.cache
def dead_letter_definitions(
    names: FrameworkNames = BARE,
) -> tuple[dg.AssetsDefinition, dg.SensorDefinition]:
    """The dead-letter asset and its sensor under one code location's names.

    Each location gets its own dynamic partitions set too: Dagster keeps those per
    instance, by name, and one location's entries are no partitions of another's asset.
    """
    partitions = dg.DynamicPartitionsDefinition(name=names.definition("dead_letter_entries"))
    asset = _dead_letter_asset(names.asset_key("dead_letter"), partitions)

    @dg.sensor(
        name=names.definition("dead_letter_sensor"),
        asset_selection=[asset],
        minimum_interval_seconds=DEAD_LETTER_TICK_SECONDS,
        # On by default: under `dagster dev` a quarantined partition must alert without
        # anyone first finding and starting a sensor. The ledger keeps that to one alert
        # per entry.
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Alerts each new quarantine entry of this code location's backfills once "
        "and adds it as a dead_letter partition.",
    )
    def dead_letter_sensor(
        context: dg.SensorEvaluationContext,
        jobs_platform: JobsPlatformResource,
        alerts: AlertsResource,
    ) -> dg.SensorResult:
        return _dead_letter_tick(context, jobs_platform, alerts, asset.key, partitions)

    return asset, dead_letter_sensor


def _dead_letter_asset(
    key: dg.AssetKey, partitions: dg.DynamicPartitionsDefinition
) -> dg.AssetsDefinition:
    @dg.asset(
        key=key,
        partitions_def=partitions,
        group_name="dead_letter",
        description="One partition per quarantine entry (its id): the failed partition, its "
        "whole failure history and how to requeue it.",
    )
    def dead_letter(
        context: dg.AssetExecutionContext, jobs_platform: JobsPlatformResource
    ) -> dg.MaterializeResult:
        engine = jobs_platform.ready_warehouse()
        with engine.connect() as connection:
            try:
                alert = load_alert(
                    connection, int(context.partition_key), location_of_run(context.run)
                )
            except (UnknownEntry, ValueError) as error:
                raise dg.Failure(
                    f"dead_letter partition {context.partition_key!r}: {error}",
                    allow_retries=False,
                ) from None
            review = latest_review(connection, alert.asset, alert.partition)
        metadata = dead_letter_metadata(alert)
        if review is not None:
            # The gate's refusal (`expect=`): the diff and a sample of its keys, as evidence.
            metadata["change"] = dg.MetadataValue.json(review_evidence(review))
        return dg.MaterializeResult(metadata=metadata)

    return dead_letter


def _dead_letter_tick(
    context: dg.SensorEvaluationContext,
    jobs_platform: JobsPlatformResource,
    alerts: AlertsResource,
    asset_key: dg.AssetKey,
    partitions: dg.DynamicPartitionsDefinition,
) -> dg.SensorResult:
    # The entries of this location's backfills only: another location sharing the
    # warehouse alerts and shows its own.
    served = served_backfills(context.repository_def)
    if not served:
        return dg.SensorResult(skip_reason="this code location serves no backfill")
    cursor = DeadLetterCursor.parse(context.cursor)
    settings = jobs_platform.settings()
    store = jobs_platform.ready_store()
    sinks = alerts.sinks(settings)
    names = [sink.name for sink in sinks]
    location = location_of_sensor(context)  # what the alerts' requeue commands name
    # Read everything first: a connection held across the sends would, on SQLite, hold the
    # warehouse's write lock while a webhook answers.
    with store.connect() as connection:
        # Entries a sink still owes: those due now are tried, the rest wait for their next
        # try without costing a query of their history.
        owed = store.alert_ledger.undelivered(connection, cursor.undelivered, names)
        retrying = load_alerts(connection, owed.due[:ENTRIES_PER_TICK], location)
        # Only entries after the cursor, walked by primary key: a tick costs what is new.
        new = [
            alert_for_entry(connection, entry, location)
            for entry in entries_after(
                connection, cursor.last_entry_id, limit=ENTRIES_PER_TICK, assets=served
            )
        ]
        notices = due_notices(connection, store.clock, served, names, limit=NOTICES_PER_TICK)
    # One worker per sink for the whole tick: a sink that is down delays no other.
    statuses = deliver_all(store, [*retrying, *new, *notices], sinks)
    entry_statuses = statuses[: len(retrying) + len(new)]
    undelivered = [*owed.waiting, *owed.due[ENTRIES_PER_TICK:]] + [
        alert.entry_id
        for alert, delivered in zip([*retrying, *new], entry_statuses, strict=True)
        if not is_settled(delivered)
    ]
    last_seen, requests = cursor.last_entry_id, []
    for alert, delivered in zip(new, entry_statuses[len(retrying) :], strict=True):
        context.log.info(
            f"quarantine entry {alert.entry_id} ({alert.asset}/{alert.partition}): "
            f"alerts {_described(delivered)}"
        )
        # The run key makes the daemon launch each entry's partition once, tick after tick.
        requests.append(
            dg.RunRequest(
                run_key=str(alert.entry_id),
                partition_key=str(alert.entry_id),
                asset_selection=[asset_key],
            )
        )
        last_seen = alert.entry_id
    for notice, delivered in zip(notices, statuses[len(entry_statuses) :], strict=True):
        context.log.info(
            f"notice {notice.notice_id} ({notice.kind} {notice.asset}: {notice.key}): "
            f"alerts {_described(delivered)}"
        )
    added = [request.partition_key for request in requests if request.partition_key is not None]
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[partitions.build_add_request(added)] if added else [],
        cursor=DeadLetterCursor(last_seen, tuple(sorted(undelivered))).serialize(),
        skip_reason=None if requests else "no new quarantine entries",
    )


def _described(statuses: dict[str, DeliveryStatus]) -> str:
    return ", ".join(f"{sink} {status}" for sink, status in statuses.items())


dead_letter, dead_letter_sensor = dead_letter_definitions(BARE)


def _timestamp(value) -> dg.MetadataValue:
    return dg.MetadataValue.timestamp(value) if value is not None else dg.MetadataValue.null()

"""Chaos soak on Celery workers: `bin/soak --minutes N` prints what it did and found.

For N minutes, rounds of a 30-partition backfill of `orders_backfill` (one run per
partition, a few at a time, like a Dagster backfill) run on W Celery workers over
RabbitMQ with the instance and the warehouse on PostgreSQL, while a chaos loop injects
faults at random: SIGKILL of a worker's pool process, SIGKILL of a whole worker (restarted
a few seconds later), SIGSTOP of a pool process for up to twice the lease TTL then
SIGCONT, and `pg_terminate_backend` of the warehouse's connections. Each round re-seeds
the landing zone with new data, so every round must converge to a new input.

Three poison days: malformed lines (terminal: quarantined after one attempt), a read that
always fails transiently, and a read that always crashes its worker process (both
quarantined at the attempt ceiling). A partition whose run failed for any other reason
is launched again, as a backfill re-run would. At the end it checks that every good
partition equals the reference computed from its input, every poison day is quarantined
as expected, no run is left STARTED and no lease is held, and exits 1 when one does not.

Not a test: it needs minutes, and its figures go into docs/SOAK.md.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg
import sqlalchemy as sa

from deploy import stack
from jobs_platform.store.db import dispose_engines
from jobs_platform_tests.commands import start_run
from jobs_platform_tests.databases import PG_ADMIN_URL, pg_database, wait_for_drops
from jobs_platform_tests.distributed.cluster import (
    Workers,
    distributed_environment,
    finish_vhost_deletions,
    postgres_instance_home,
    process_group_of,
    rabbitmq_vhost,
    runs_in_status,
)
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.landing import expected_tables_from_landing
from jobs_platform_tests.rows import table_snapshot

FIRST_DAY = dt.date(2024, 2, 1)
PARTITIONS = 30
MALFORMED, TRANSIENT, CRASHING = "2024-02-07", "2024-02-15", "2024-02-23"
POISON = (MALFORMED, TRANSIENT, CRASHING)
MAX_ATTEMPTS = 6  # room for the chaos's own crashes on a good day before the ceiling
LEASE_SECONDS = 10
LAUNCHES_PER_PARTITION = 6
RUN_TIMEOUT_SECONDS = 600
FAULTS = ("kill_pool", "kill_worker", "stop_pool", "pg_terminate")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bin/soak", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--parallel-runs", type=int, default=4)
    parser.add_argument("--orders-per-day", type=int, default=2000)
    parser.add_argument("--chunk-rows", type=int, default=250)
    parser.add_argument("--fault-every", type=float, default=8.0, help="mean seconds between")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1_000_000)
    print(f"soak: seed {seed}, {args.minutes:g} min, {args.workers} workers, RabbitMQ")
    try:
        with (
            tempfile.TemporaryDirectory(prefix="jp_soak_") as folder,
            rabbitmq_vhost() as broker,
            pg_database("jp_soak_wh") as warehouse,
            pg_database("jp_soak_instance") as instance_url,
        ):
            soak = Soak(Path(folder), warehouse, instance_url, broker, args, random.Random(seed))
            try:
                return soak.run()
            finally:
                soak.stop()
                dispose_engines()
    finally:
        for failure in finish_vhost_deletions():
            print(f"soak: {failure}", file=sys.stderr)
        wait_for_drops()  # its databases are dropped on a thread: not left behind at exit


class Soak:
    def __init__(self, folder, warehouse, instance_url, broker, args, rng) -> None:
        self.folder = folder
        self.args = args
        self.rng = rng
        home = postgres_instance_home(folder, instance_url)
        self.env = distributed_environment(
            warehouse,
            home,
            folder,
            broker,
            "rpc://",
            JOBS_PLATFORM_MAX_ATTEMPTS=str(MAX_ATTEMPTS),
            JOBS_PLATFORM_LEASE_SECONDS=str(LEASE_SECONDS),
            JOBS_PLATFORM_RETRY_DELAY_SECONDS="0.5",
            JOBS_PLATFORM_FAILPOINTS=f"read@orders/{TRANSIENT}=transient,"
            f"read@orders/{CRASHING}=crash",
        )
        self.engine = engine_from(self.env)
        self.workers = Workers(stack.StackLayout(folder / "stack"))
        self.days = [(FIRST_DAY + dt.timedelta(days=n)).isoformat() for n in range(PARTITIONS)]
        self.faults: collections.Counter[str] = collections.Counter()
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.stopped: dict[int, float] = {}  # pid → when to SIGCONT
        self.down: dict[str, float] = {}  # worker → when to restart
        self.failures: list[str] = []

    def run(self) -> int:
        self.workers.start(self.args.workers, self.env, cwd=self.folder)
        started = time.monotonic()
        end = started + self.args.minutes * 60
        rounds = 0
        while time.monotonic() < end or rounds == 0:
            rounds += 1
            self._seed(rounds)
            seconds = self._round(rounds, until=end)
            self._check(rounds)
            print(f"round {rounds}: {PARTITIONS} partitions in {seconds:.0f}s")
        self._settle()
        self._check_final()
        self._report(rounds, time.monotonic() - started)
        return 1 if self.failures else 0

    def _seed(self, round_number: int) -> None:
        from orders_example.orders.seed import seed_orders

        seed_orders(
            self.env["JOBS_PLATFORM_LANDING"],
            FIRST_DAY,
            dt.date.fromisoformat(self.days[-1]),
            orders_per_day=self.args.orders_per_day,
            poison_days=[dt.date.fromisoformat(MALFORMED)],
            seed=round_number,
        )

    def _round(self, round_number: int, until: float) -> float:
        """Launch every partition, relaunch failed ones, inject faults while runs go on."""
        began = time.monotonic()
        pending = list(self.days)
        launches: collections.Counter[str] = collections.Counter()
        running: dict[str, subprocess.Popen] = {}
        launched_at: dict[str, float] = {}
        next_fault = time.monotonic() + self._fault_gap()
        while pending or running:
            while pending and len(running) < self.args.parallel_runs:
                day = pending.pop(0)
                launches[day] += 1
                self.outcomes["runs_launched"] += 1
                log = self.folder / f"run-{round_number}-{day}-{launches[day]}.log"
                running[day] = start_run(
                    self.env, day, chunk_rows=self.args.chunk_rows, log_path=log
                )
                launched_at[day] = time.monotonic()
            for day, process in list(running.items()):
                code = process.poll()
                if code is None and time.monotonic() - launched_at[day] > RUN_TIMEOUT_SECONDS:
                    os.killpg(process.pid, signal.SIGKILL)
                    code = process.wait()
                    self.outcomes["runs_timed_out"] += 1
                if code is None:
                    continue
                del running[day]
                if code == 0:
                    self.outcomes["runs_succeeded"] += 1
                elif self._quarantined(day):
                    self.outcomes["runs_failed_quarantined"] += 1
                elif launches[day] < LAUNCHES_PER_PARTITION:
                    self.outcomes["runs_failed_relaunched"] += 1
                    pending.append(day)
                else:
                    self.outcomes["runs_failed_given_up"] += 1
                    self.failures.append(f"round {round_number}: {day} never finished")
            now = time.monotonic()
            if now >= next_fault and now < until:
                self._inject_fault()
                next_fault = now + self._fault_gap()
            self._resume_due()
            time.sleep(0.2)
        return time.monotonic() - began

    def _fault_gap(self) -> float:
        return self.rng.uniform(0.5, 1.5) * self.args.fault_every

    def _inject_fault(self) -> None:
        fault = self.rng.choice(FAULTS)
        live = [name for name in self.workers.names if name not in self.down]
        if fault == "pg_terminate":
            with sa.create_engine(PG_ADMIN_URL, poolclass=sa.NullPool).connect() as connection:
                killed = connection.execute(
                    sa.text(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE datname = :name AND pid <> pg_backend_pid()"
                    ),
                    {"name": self.engine.url.database},
                ).scalar_one()
            self.faults["pg_terminate"] += 1
            self.faults["pg_backends_terminated"] += killed
            return
        if not live:
            return
        name = self.rng.choice(live)
        if fault == "kill_worker":
            os.killpg(int(self.workers.layout.pid_file(name).read_text()), signal.SIGKILL)
            self.down[name] = time.monotonic() + self.rng.uniform(2, 8)
            self.faults["kill_worker"] += 1
            return
        pool = self._pool_processes(name)
        if not pool:
            return
        pid = self.rng.choice(pool)
        if fault == "kill_pool":
            os.kill(pid, signal.SIGKILL)
            self.faults["kill_pool"] += 1
        elif pid not in self.stopped:
            os.kill(pid, signal.SIGSTOP)
            self.stopped[pid] = time.monotonic() + self.rng.uniform(3, 2 * LEASE_SECONDS)
            self.faults["stop_pool"] += 1

    def _pool_processes(self, name: str) -> list[int]:
        """The worker's pool children: processes of its group whose parent is celery's main."""
        group = int(self.workers.layout.pid_file(name).read_text())
        members = stack.live_group_members(group)
        main_processes = {pid for pid, parent in members.items() if parent == group}
        return [pid for pid, parent in members.items() if parent in main_processes]

    def _resume_due(self) -> None:
        now = time.monotonic()
        for pid, due in list(self.stopped.items()):
            if now >= due:
                if process_group_of(pid) is not None:
                    os.kill(pid, signal.SIGCONT)
                del self.stopped[pid]
        for name, due in list(self.down.items()):
            if now >= due:
                self._restart(name)
                del self.down[name]

    def _restart(self, name: str) -> None:
        layout = self.workers.layout
        env = {**os.environ, **self.env}
        stack.start_process(layout, name, stack.worker_command(layout, name), env, cwd=self.folder)
        self.faults["worker_restarts"] += 1

    def _settle(self) -> None:
        for pid in list(self.stopped):
            if process_group_of(pid) is not None:
                os.kill(pid, signal.SIGCONT)
        self.stopped.clear()
        for name in list(self.down):
            self._restart(name)
        self.down.clear()

    def _quarantined(self, day: str) -> bool:
        with self.engine.connect() as connection:
            status = connection.execute(
                sa.text(
                    "SELECT status FROM jp_partitions WHERE asset = 'orders' AND partition = :d"
                ),
                {"d": day},
            ).scalar_one_or_none()
        return status == "quarantined"

    def _check(self, round_number: int) -> None:
        landing = self.env["JOBS_PLATFORM_LANDING"]
        good = [day for day in self.days if day not in POISON]
        expected_orders, expected_revenue = [], []
        for day in good:
            orders_rows, revenue_rows = expected_tables_from_landing(landing, day)
            expected_orders += orders_rows
            expected_revenue += revenue_rows
        poison_dates = {dt.date.fromisoformat(day) for day in POISON}
        orders = [row for row in table_snapshot(self.engine, "orders")
                  if row[5].date().isoformat() not in POISON]  # fmt: skip
        revenue = [
            r for r in table_snapshot(self.engine, "daily_revenue") if r[0] not in poison_dates
        ]
        if orders != sorted(expected_orders):
            self.failures.append(f"round {round_number}: orders differ from the reference")
        if revenue != sorted(expected_revenue):
            self.failures.append(f"round {round_number}: daily_revenue differs from the reference")
        self.outcomes["good_partitions_checked"] += len(good)

    def _check_final(self) -> None:
        with self.engine.connect() as connection:
            entries = {
                row.partition: row
                for row in connection.execute(
                    sa.text(
                        "SELECT partition, attempts, error_class FROM jp_quarantine "
                        "WHERE asset = 'orders' AND status = 'quarantined'"
                    )
                )
            }
            held = connection.execute(
                sa.text("SELECT count(*) FROM jp_leases WHERE holder IS NOT NULL")
            ).scalar_one()
        expected = {MALFORMED: 1, TRANSIENT: MAX_ATTEMPTS, CRASHING: MAX_ATTEMPTS}
        self.quarantine = {day: (row.attempts, row.error_class) for day, row in entries.items()}
        for day, attempts in expected.items():
            if day not in entries or entries[day].attempts != attempts:
                self.failures.append(f"{day}: expected quarantined after {attempts} attempt(s)")
        for day in set(entries) - set(POISON):
            self.failures.append(f"{day}: a good partition was quarantined")
        if held:
            self.failures.append(f"{held} lease(s) still held")
        with dg.DagsterInstance.from_config(self.env["DAGSTER_HOME"]) as instance:
            left = runs_in_status(
                instance, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING
            )
            self.runs_by_status = collections.Counter(
                run.status.value for run in instance.get_runs(limit=100_000)
            )
        if left:
            self.failures.append(f"{len(left)} run(s) left STARTED")
        self.leases_held = held

    def _report(self, rounds: int, seconds: float) -> None:
        figures = {
            "minutes": round(seconds / 60, 1),
            "rounds": rounds,
            "partitions_per_round": PARTITIONS,
            "workers": self.args.workers,
            "faults": dict(sorted(self.faults.items())),
            "runs": dict(sorted(self.outcomes.items())),
            "runs_by_status": dict(sorted(self.runs_by_status.items())),
            "quarantined": {day: list(v) for day, v in sorted(self.quarantine.items())},
            "leases_held": self.leases_held,
            "failures": self.failures,
        }
        print(json.dumps(figures, indent=2))
        print("soak: OK" if not self.failures else "soak: FAILED")

    def stop(self) -> None:
        self._settle_quietly()
        self.workers.stop_all()

    def _settle_quietly(self) -> None:
        for pid in list(self.stopped):
            if process_group_of(pid) is not None:
                os.kill(pid, signal.SIGCONT)
        self.stopped.clear()


if __name__ == "__main__":
    sys.exit(main())

"""The Dagster UI in a real browser: backfill from the UI, then read the dead letter there.

`dagster dev` (webserver and daemon) runs on a fresh warehouse and a Dagster home that uses
the repo's `dagster.yaml`; Debian's Chromium, driven by Playwright, launches a backfill of
orders + daily_revenue over three days (one poisoned) and finds the quarantined day's
failure history on the `dead_letter` asset. Screenshots go to `artifacts/ui/`; with
`JOBS_PLATFORM_UPDATE_SCREENSHOTS=1` the README's copies in `docs/images/` are refreshed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from jobs_platform_tests.commands import DAGSTER, REPO_ROOT
from jobs_platform_tests.daemon_loops import fast_daemon_loops
from jobs_platform_tests.databases import prepare_warehouse
from jobs_platform_tests.environments import platform_environment
from jobs_platform_tests.waiting import wait_for
from orders_example.orders.seed import seed_orders

CHROMIUM = Path("/usr/bin/chromium")
# Flags checked on this stack (shared NOTES): no sandbox as root, no GPU, nothing phoning home.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
# Wide enough for the whole failure-history table of the dead letter.
VIEWPORT = {"width": 1760, "height": 1000}
ARTIFACTS = REPO_ROOT / "artifacts" / "ui"
README_IMAGES = {"backfill.png": "ui-backfill.png", "dead_letter.png": "ui-dead-letter.png"}

LOCATION = "orders_example.definitions"
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
POISON_DAY = "2024-01-02"

# Generous: the machine running this may be busy; every wait polls and ends early.
SERVER_START_TIMEOUT = 180  # the webserver answers, then the code location loads (30+ s)
# One run for the three days: a process start and imports per step.
BACKFILL_TIMEOUT = 600
DEAD_LETTER_TIMEOUT = 300  # the sensor ticks, then its run has to start
UI_TIMEOUT_MS = 60_000  # one page or element on a loaded 2-core box
FINISHED_BACKFILL = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"}

WORKSPACE_QUERY = """
{ workspaceOrError { __typename ... on Workspace { locationEntries {
    name loadStatus locationOrLoadError { __typename ... on PythonError { message } } } } } }
"""
BACKFILLS_QUERY = """
{ partitionBackfillsOrError(limit: 10) { __typename ... on PartitionBackfills { results {
    id status partitionNames assetSelection { path } } } } }
"""
BACKFILL_QUERY = """
query ($id: String!) { partitionBackfillOrError(backfillId: $id) {
  __typename ... on PartitionBackfill { id status
    runs(limit: 20) { runId status tags { key value } } } } }
"""
CHAIN_QUERY = """
{ assetNodeOrError(assetKey: {path: ["daily_revenue"]}) { __typename ... on AssetNode {
    opNames op { description } metadataEntries { label ... on TextMetadataEntry { text } } } } }
"""
CHAIN_STEP = "chain__orders__daily_revenue"
DEAD_LETTER_QUERY = """
{ assetOrError(assetKey: {path: ["dead_letter"]}) { __typename ... on Asset {
    assetMaterializations(limit: 20) { partition runId
      metadataEntries { label ... on TextMetadataEntry { text } } } } } }
"""


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_backfill_from_the_ui_and_its_dead_letter_history(pg_url, tmp_path):
    sync_playwright, expect = _playwright()
    prepare_warehouse(pg_url)  # the deploy step: `jobs-platform db upgrade` and the tables
    env = platform_environment(pg_url, tmp_path)
    # The repo's instance settings (QueuedRunCoordinator, run monitoring, run retries),
    # so the test exercises what `dagster dev` in the repo root uses.
    shutil.copyfile(REPO_ROOT / "dagster.yaml", Path(env["DAGSTER_HOME"]) / "dagster.yaml")
    seed_orders(
        env["JOBS_PLATFORM_LANDING"],
        dt.date.fromisoformat(DAYS[0]),
        dt.date.fromisoformat(DAYS[-1]),
        orders_per_day=50,
        poison_days=[dt.date.fromisoformat(POISON_DAY)],
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    with (
        # The daemon loops every second and the dead-letter sensor ticks every 2 s, not
        # 30 s: the backfill's runs and the sensor's run start within seconds.
        dagster_dev(
            fast_daemon_loops(env, sensor_seconds={"dead_letter_sensor": 2}),
            tmp_path / "dagster_dev.log",
        ) as server,
        sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        page = browser.new_page(viewport=VIEWPORT)
        page.set_default_timeout(UI_TIMEOUT_MS)
        page.set_default_navigation_timeout(UI_TIMEOUT_MS)
        # A fresh instance shows "Join the Dagster community" over any page, at any moment.
        skip = page.get_by_role("button", name="Skip")
        page.add_locator_handler(skip, lambda dialog_button: dialog_button.click())
        body = page.locator("body")
        try:
            page.goto(f"{server.url}/locations")
            expect(body).to_contain_text(LOCATION, timeout=UI_TIMEOUT_MS)
            expect(body).to_contain_text("Loaded", timeout=UI_TIMEOUT_MS)
            page.screenshot(path=ARTIFACTS / "code_location.png")

            page.goto(f"{server.url}/assets")
            page.locator('a[href="/assets/orders"]').click()
            expect(page.get_by_role("tab", name="Partitions")).to_be_visible()
            # By its address: a click on the tab while the asset page still loads is lost
            # (seen once in CI: the page stayed on Overview).
            page.goto(f"{server.url}/assets/orders?view=partitions")
            expect(body).to_contain_text("Missing", timeout=UI_TIMEOUT_MS)
            expect(body).to_contain_text("Materialized (0)", timeout=UI_TIMEOUT_MS)

            # The chain shows itself: the asset names its step (one op for orders and
            # daily_revenue, named for both) and where its run config goes.
            chained = server.graphql(CHAIN_QUERY)["assetNodeOrError"]
            assert chained["opNames"] == [CHAIN_STEP]
            assert chained["op"]["description"].startswith("A chain: the backfills orders")
            texts = {e["label"]: e.get("text") for e in chained["metadataEntries"]}
            assert texts["jobs_platform/step"] == CHAIN_STEP
            assert texts["jobs_platform/chain"] == "orders, daily_revenue"
            page.goto(f"{server.url}/assets/daily_revenue")
            expect(body).to_contain_text("jobs_platform/run_config", timeout=UI_TIMEOUT_MS)
            expect(body).to_contain_text(
                f"ops.{CHAIN_STEP}.config.daily_revenue", timeout=UI_TIMEOUT_MS
            )
            page.screenshot(path=ARTIFACTS / "chain.png")

            launch_backfill_from_the_job_page(page, expect, server.url)
            backfill = wait_for(
                lambda: only_backfill(server),
                timeout=UI_TIMEOUT_MS / 1000,
                interval=0.5,
                what="the backfill launched from the UI",
            )
            assert sorted(backfill["partitionNames"]) == DAYS
            assert sorted(key["path"][0] for key in backfill["assetSelection"]) == [
                "daily_revenue",
                "orders",
            ]
            finished = wait_for(
                lambda: finished_backfill(server, backfill["id"]),
                timeout=BACKFILL_TIMEOUT,
                interval=0.5,
                what=f"backfill {backfill['id']} to finish",
            )
            # Launched from the job page, the job's runs hold both assets and take the
            # job's policy (the smaller of theirs, 30 days): one run over the three days,
            # failed by its poison day; the partition view below shows which day failed.
            statuses = sorted((_days_of(run), run["status"]) for run in finished["runs"])
            assert statuses == [(("2024-01-01", "2024-01-03"), "FAILURE")], finished
            assert finished["status"] == "COMPLETED_FAILED", finished
            poison_run_id = next(
                run["runId"] for run in finished["runs"] if run["status"] == "FAILURE"
            )

            page.goto(f"{server.url}/runs/b/{backfill['id']}")
            expect(body).to_contain_text("Failed", timeout=UI_TIMEOUT_MS)
            expect(body).to_contain_text("100% completed", timeout=UI_TIMEOUT_MS)
            page.screenshot(path=ARTIFACTS / "backfill_status.png")

            range_ = f"[{DAYS[0]}...{DAYS[-1]}]"
            page.goto(
                f"{server.url}/assets/orders?view=partitions"
                f"&default_range={range_}&partition={POISON_DAY}"
            )
            expect(body).to_contain_text("3 Partitions Selected", timeout=UI_TIMEOUT_MS)
            expect(body).to_contain_text("Failed (1)", timeout=UI_TIMEOUT_MS)
            expect(body).to_contain_text("Materialized (2)", timeout=UI_TIMEOUT_MS)
            expect(body).to_contain_text(f"Run {poison_run_id[:8]} failed", timeout=UI_TIMEOUT_MS)
            page.screenshot(path=ARTIFACTS / "backfill.png")

            dead_letter_partition = wait_for(
                lambda: dead_letter_partition_of(server, "orders", POISON_DAY),
                timeout=DEAD_LETTER_TIMEOUT,
                interval=0.5,
                what=f"dead_letter_sensor to materialize orders/{POISON_DAY}",
            )
            page.goto(
                f"{server.url}/assets/dead_letter?view=partitions&partition={dead_letter_partition}"
            )
            history = page.locator("table").filter(has_text="error_type").last
            expect(history).to_be_visible(timeout=UI_TIMEOUT_MS)
            for text in [
                "quarantined",
                "terminal",
                "not valid JSON",
                # Named by the location `dagster dev` loaded (workspace.yaml), pasteable.
                f"dead-letter requeue -m orders_example.definitions orders {POISON_DAY}",
            ]:
                expect(body).to_contain_text(text, timeout=UI_TIMEOUT_MS)
            for column in ["episode", "attempt", "run_id", "error_class", "message", "at"]:
                expect(history).to_contain_text(column)
            # The history names the backfill's failed run: the UI ties the two together.
            expect(history).to_contain_text(poison_run_id)
            expect(history).to_contain_text("InputValidationError")
            page.screenshot(path=ARTIFACTS / "dead_letter.png")
        except BaseException:
            with contextlib.suppress(Exception):
                page.screenshot(path=ARTIFACTS / "failure.png")
            raise
        finally:
            browser.close()

    if os.environ.get("JOBS_PLATFORM_UPDATE_SCREENSHOTS") == "1":
        images = REPO_ROOT / "docs" / "images"
        images.mkdir(parents=True, exist_ok=True)
        for artifact, image in README_IMAGES.items():
            shutil.copyfile(ARTIFACTS / artifact, images / image)


def launch_backfill_from_the_job_page(page, expect, base_url: str) -> None:
    """Jobs → orders_backfill → Materialize all… → a custom range of three days → launch.

    The job page materializes exactly the job's two assets, as one backfill of its
    partition set.
    """
    page.goto(f"{base_url}/locations/{LOCATION}/jobs/orders_backfill")
    # Not just any dialog: "Join the Dagster community" is one too, at any moment.
    dialog = page.get_by_role("dialog").filter(has_text="to materialize")
    click_until_visible(page.get_by_role("button", name="Materialize all…"), dialog)
    expect(dialog).to_contain_text("materialize 2 assets", timeout=UI_TIMEOUT_MS)
    # Seeded days are years back: widen the dialog's default window to all partitions.
    dialog.get_by_text("Show all partitions").click()
    expect(dialog).to_contain_text("All time", timeout=UI_TIMEOUT_MS)
    partitions = dialog.get_by_placeholder(re.compile(r"^ex: "))
    partitions.fill(f"[{DAYS[0]}...{DAYS[-1]}]")
    partitions.press("Enter")
    expect(dialog).to_contain_text("3 partitions", timeout=UI_TIMEOUT_MS)
    page.screenshot(path=ARTIFACTS / "backfill_dialog.png")
    dialog.get_by_role("button", name="Launch backfill").click()
    expect(dialog).to_be_hidden(timeout=UI_TIMEOUT_MS)


def click_until_visible(button, appears, *, attempts: int = 3) -> None:
    """Click until `appears` shows: a click while the page still renders can be lost."""
    for _ in range(attempts - 1):
        if appears.is_visible():
            return
        button.click()
        with contextlib.suppress(Exception):  # Playwright's TimeoutError
            appears.wait_for(state="visible", timeout=UI_TIMEOUT_MS / attempts)
    if not appears.is_visible():
        button.click()
    appears.wait_for(state="visible", timeout=UI_TIMEOUT_MS)


def only_backfill(server: DagsterDev) -> dict | None:
    results = server.graphql(BACKFILLS_QUERY)["partitionBackfillsOrError"]["results"]
    assert len(results) <= 1, f"expected one backfill, found {results}"
    return results[0] if results else None


def finished_backfill(server: DagsterDev, backfill_id: str) -> dict | None:
    backfill = server.graphql(BACKFILL_QUERY, id=backfill_id)["partitionBackfillOrError"]
    return backfill if backfill["status"] in FINISHED_BACKFILL else None


def dead_letter_partition_of(server: DagsterDev, asset: str, partition: str) -> str | None:
    """The `dead_letter` partition (a quarantine entry id) materialized for asset/partition."""
    dead_letter = server.graphql(DEAD_LETTER_QUERY)["assetOrError"]
    for materialization in dead_letter.get("assetMaterializations", []):
        texts = {e["label"]: e.get("text") for e in materialization["metadataEntries"]}
        if texts.get("asset") == asset and texts.get("partition") == partition:
            return materialization["partition"]
    return None


def _tag(run: dict, key: str) -> str | None:
    return next((tag["value"] for tag in run["tags"] if tag["key"] == key), None)


def _days_of(run: dict) -> tuple[str | None, str | None]:
    """(first, last) partition of a run: its range tags, or its single partition tag."""
    single = _tag(run, "dagster/partition")
    if single is not None:
        return single, single
    return (
        _tag(run, "dagster/asset_partition_range_start"),
        _tag(run, "dagster/asset_partition_range_end"),
    )


class DagsterDev:
    """A running `dagster dev` and its webserver's GraphQL endpoint."""

    def __init__(self, url: str) -> None:
        self.url = url

    def graphql(self, query: str, **variables) -> dict:
        response = httpx.post(
            f"{self.url}/graphql", json={"query": query, "variables": variables}, timeout=60
        )
        response.raise_for_status()
        payload = response.json()
        assert not payload.get("errors"), payload["errors"]
        return payload["data"]


@contextlib.contextmanager
def dagster_dev(env: dict[str, str], log_path: Path) -> Iterator[DagsterDev]:
    """`dagster dev` (webserver + daemon) in the repo root, its code location loaded.

    Runs in its own process group, stopped whole at the end (SIGTERM, then SIGKILL) so
    no daemon, code server or run worker outlives the test; its log tail is printed when
    the test fails.
    """
    port = _free_port()
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [DAGSTER, "dev", "-w", "workspace.yaml", "-p", str(port), "-h", "127.0.0.1"],
            cwd=REPO_ROOT,
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = DagsterDev(f"http://127.0.0.1:{port}")
    try:
        wait_for(
            lambda: _location_loaded(server, process),
            timeout=SERVER_START_TIMEOUT,
            interval=0.5,
            what=f"`dagster dev` to serve {LOCATION}",
        )
        yield server
    except BaseException:
        lines = log_path.read_text(errors="replace").splitlines()
        print(f"--- last lines of {log_path} ---", *lines[-80:], sep="\n")
        raise
    finally:
        _stop_group(process)


def _location_loaded(server: DagsterDev, process: subprocess.Popen) -> bool:
    if process.poll() is not None:
        raise AssertionError(f"`dagster dev` exited with code {process.returncode}")
    try:
        workspace = server.graphql(WORKSPACE_QUERY)["workspaceOrError"]
    except httpx.HTTPError:
        return False  # not answering yet
    for entry in workspace.get("locationEntries", []):
        if entry["name"] != LOCATION or entry["loadStatus"] != "LOADED":
            continue
        error = entry["locationOrLoadError"]
        if error and error["__typename"] == "PythonError":
            raise AssertionError(f"code location {LOCATION} failed to load: {error['message']}")
        return True
    return False


def _stop_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=30)
    # Children (daemon, code servers, run workers) may outlive `dagster dev` itself.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _playwright():
    """Playwright's sync API, failing (never skipping) with how to install what is missing."""
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        pytest.fail("playwright is missing: pip install -e '.[dev]'", pytrace=False)
    if not CHROMIUM.exists():
        pytest.fail(f"Chromium is missing at {CHROMIUM}: apt-get install chromium", pytrace=False)
    return sync_playwright, expect

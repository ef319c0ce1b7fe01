"""The `jobs-platform` command lines the framework suggests to a person, ready to paste.

One home for every suggested command (the CLI's output, alerts, the `dead_letter` asset's
metadata, a failed step's metadata and description): each argument is shell-quoted, so a
partition key such as `2024-03-03|apac` or `o'brien` stays one argument instead of
becoming a pipe or an open quote, and the command names its code location with
`-m MODULE`, so that it acts on the location the suggestion came from. Plain Python: the
caller knows the location (`cli`: `-m`; `orchestration`: the run's or the sensor's code
origin) and passes its module in.
"""

from __future__ import annotations

import shlex

PROGRAM = "jobs-platform"


def suggested_command(*arguments: str) -> str:
    """`jobs-platform ARGUMENTS…` as one line a POSIX shell splits back into the arguments."""
    return shlex.join([PROGRAM, *arguments])


def requeue_command(asset: str, partition: str, module: str | None) -> str:
    """The command that releases a quarantined partition and launches a run of it."""
    return _about_a_partition("requeue", asset, partition, module)


def show_command(asset: str, partition: str, module: str | None) -> str:
    """The command that shows a partition's entry and attempt history."""
    return _about_a_partition("show", asset, partition, module)


def accept_change_command(asset: str, partition: str, module: str | None) -> str:
    """The command that approves a partition's refused change once and releases it."""
    return _about_a_partition("accept-change", asset, partition, module)


def _about_a_partition(action: str, asset: str, partition: str, module: str | None) -> str:
    location = ["-m", module] if module else []
    # A key that starts with "-" would be read as an option: "--" ends the options.
    end_of_options = ["--"] if asset.startswith("-") or partition.startswith("-") else []
    return suggested_command("dead-letter", action, *location, *end_of_options, asset, partition)

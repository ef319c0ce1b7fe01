"""A suggested command, pasted into a shell, runs exactly the command it names."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from jobs_platform.cli.main import _parser
from jobs_platform.suggested_commands import requeue_command, show_command

MODULE = "acme.defs"
AWKWARD = [
    ("events", "2024-03-03|apac"),  # a multi-partition key: unquoted, a pipe
    ("tenants", "o'brien & sons"),  # a quote, a space, an ampersand
    ("tenants", 'say "hi" $HOME `id` ; *'),  # nothing is expanded or run
    ("acme/events", "2024-03-03-05:00"),  # an asset key with a prefix, an hourly key
    ("offsets", "-1"),  # would read as an option
]


def words_bash_passes(command: str) -> list[str]:
    """The arguments bash gives the command's program: each printed on its own line."""
    echo = "printf '%s\\n' " + command.removeprefix("jobs-platform ")
    printed = subprocess.run(["bash", "-c", echo], capture_output=True, text=True, check=True)
    return ["jobs-platform", *printed.stdout.splitlines()]


@pytest.mark.parametrize(("asset", "partition"), AWKWARD)
def test_a_requeue_command_is_one_argument_per_word_in_bash(asset, partition):
    command = requeue_command(asset, partition, MODULE)

    assert shlex.split(command)[-2:] == [asset, partition]
    assert words_bash_passes(command) == shlex.split(command)
    assert shlex.split(command)[:5] == ["jobs-platform", "dead-letter", "requeue", "-m", MODULE]


@pytest.mark.parametrize(("asset", "partition"), AWKWARD)
@pytest.mark.parametrize("suggest", [requeue_command, show_command])
def test_the_cli_reads_a_suggested_command_as_the_asset_partition_and_module_it_names(
    suggest, asset, partition
):
    args = _parser().parse_args(shlex.split(suggest(asset, partition, MODULE))[1:])

    assert (args.asset, args.partition, args.module) == (asset, partition, MODULE)


def test_a_plain_key_needs_no_quotes():
    assert requeue_command("orders", "2024-01-04", "orders_example.definitions") == (
        "jobs-platform dead-letter requeue -m orders_example.definitions orders 2024-01-04"
    )

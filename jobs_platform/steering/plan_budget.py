"""The attempt budget a launch's start would find spent, read for `plan`.

A worker that dies every time never reports its failure. The next attempt's start records
its abandoned attempts as crashes (`Attempts.record_abandoned`), then settles the episode's
budget (`engine.settle.settle`, on `store.attempts.budget_state`): a spent budget is
quarantined there and then, without reading the input (`outcomes.BudgetSpent`). So a
partition that looks `failed_due` may be quarantined by the launch instead.

This module reads the count that start would settle on; `steering.plan` asks the settle
rule (`engine.decisions.decide`) what it does with it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping

import sqlalchemy as sa

from jobs_platform.store.attempts import AttemptOutcome, budget_state
from jobs_platform.store.schema import attempts


def failures_at_start(
    connection: sa.Connection,
    asset: str,
    keys: Collection[str],
    episodes: Mapping[str, int],
    max_attempts: int,
) -> dict[str, int]:
    """Per partition of `keys` whose budget a start could find spent: the counted failures
    it would settle on.

    That is its episode's `budget_state`, plus its attempts still `running` (the start
    records them as crashes first). `episodes` are the partitions' current episodes (1 when
    a partition has no state). Only partitions with at least `max_attempts` failed or
    running attempts in their episode are asked: fewer cannot have spent the budget, so
    8,760 partitions cost one grouped query and a few more.
    """
    wanted = set(keys)
    if not wanted:
        return {}
    rows = connection.execute(
        sa.select(attempts.c.partition, attempts.c.episode, attempts.c.outcome, sa.func.count())
        .where(
            attempts.c.asset == asset,
            attempts.c.partition.between(min(wanted), max(wanted)),
            attempts.c.outcome.in_([AttemptOutcome.FAILED, AttemptOutcome.RUNNING]),
        )
        .group_by(attempts.c.partition, attempts.c.episode, attempts.c.outcome)
    ).all()
    ended: dict[str, int] = defaultdict(int)
    running: dict[str, int] = defaultdict(int)
    for partition, episode, outcome, count in rows:
        if partition not in wanted or episode != episodes.get(partition, 1):
            continue
        (running if outcome == AttemptOutcome.RUNNING else ended)[partition] += count
    found: dict[str, int] = {}
    for partition in sorted(set(ended) | set(running)):
        if ended[partition] + running[partition] < max_attempts:
            continue
        episode = episodes.get(partition, 1)
        state = budget_state(connection, asset, partition, episode)
        found[partition] = state.counted_failures + running[partition]
    return found

"""The gate's refusals and a person's approvals of them (`jp_change_reviews`).

A refusal keeps its evidence: the diff, the bounds it broke, the audits that failed.
`dead-letter accept-change` approves the partition's latest refusal; the next attempt
whose diff hashes the same publishes and stamps the approval used, in its finalize
transaction. An approval is then spent: a later broken contract is refused again, and a
different diff never matched it.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from jobs_platform.store.clock import Clock
from jobs_platform.store.rows import TableRow
from jobs_platform.store.schema import change_reviews

__all__ = ["ChangeReviews", "latest_review", "review_evidence"]


class ChangeReviews:
    """The refusals' SQL, stamped by one clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def record_refusal(
        self,
        connection: sa.Connection,
        asset: str,
        partition: str,
        *,
        attempt_id: int | None,
        diff_hash: str,
        evidence: dict[str, Any],
    ) -> int:
        """Keep a refusal and its evidence; returns its id."""
        inserted = connection.execute(
            sa.insert(change_reviews)
            .values(
                asset=asset,
                partition=partition,
                attempt_id=attempt_id,
                diff_hash=diff_hash,
                evidence=json.dumps(evidence, sort_keys=True),
                refused_at=self.clock.now(connection),
            )
            .returning(change_reviews.c.id)
        )
        review_id: int = inserted.scalar_one()
        return review_id

    def accept(self, connection: sa.Connection, asset: str, partition: str, by: str) -> TableRow:
        """Approve the partition's latest refusal; LookupError when there is none to approve."""
        review = latest_review(connection, asset, partition)
        if review is None:
            raise LookupError(f"{asset}/{partition} has no change refused by its gate")
        if review.published_at is not None:
            raise LookupError(
                f"{asset}/{partition}: its latest refused change was accepted and published "
                f"at {review.published_at}; nothing is waiting for approval"
            )
        if review.accepted_at is None:
            connection.execute(
                sa.update(change_reviews)
                .where(change_reviews.c.id == review.id)
                .values(accepted_by=by, accepted_at=self.clock.now(connection))
            )
        accepted = latest_review(connection, asset, partition)
        assert accepted is not None
        return accepted

    def approval_of(
        self, connection: sa.Connection, asset: str, partition: str, diff_hash: str
    ) -> int | None:
        """The id of an approval, not yet used, of exactly this diff; else None."""
        found: int | None = connection.execute(
            sa.select(change_reviews.c.id)
            .where(
                change_reviews.c.asset == asset,
                change_reviews.c.partition == partition,
                change_reviews.c.diff_hash == diff_hash,
                change_reviews.c.accepted_at.is_not(None),
                change_reviews.c.published_at.is_(None),
            )
            .order_by(change_reviews.c.id.desc())
            .limit(1)
        ).scalar_one_or_none()
        return found

    def mark_published(self, connection: sa.Connection, review_id: int) -> None:
        """The approval was used: in the transaction that publishes its diff."""
        connection.execute(
            sa.update(change_reviews)
            .where(change_reviews.c.id == review_id)
            .values(published_at=self.clock.now(connection))
        )


def latest_review(connection: sa.Connection, asset: str, partition: str) -> TableRow | None:
    """The partition's latest refusal, approved or not."""
    return connection.execute(
        sa.select(change_reviews)
        .where(change_reviews.c.asset == asset, change_reviews.c.partition == partition)
        .order_by(change_reviews.c.id.desc())
        .limit(1)
    ).one_or_none()


def review_evidence(review: TableRow) -> dict[str, Any]:
    """A refusal as `dead-letter show` prints it: its evidence, and who accepted it."""
    evidence: dict[str, Any] = json.loads(review.evidence)
    return {
        "id": review.id,
        **evidence,
        "refused_at": _iso(review.refused_at),
        "accepted_by": review.accepted_by,
        "accepted_at": _iso(review.accepted_at),
        "published_at": _iso(review.published_at),
    }


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat()

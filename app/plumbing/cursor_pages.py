"""The WHERE clause of the lists paged newest first by ``(created_at, id)`` (D17): the scans
list and the activity log write their filters once, here."""
from __future__ import annotations


def newest_first_where(equal: dict, *, created_after=None, created_before=None,
                       before: tuple | None = None) -> tuple[list[str], list]:
    """Conditions and their parameters: ``column = value`` for each of ``equal`` that is not
    None, both time bounds exclusive, and ``before``: ``(created_at, id)`` of the row the page
    starts after."""
    where, params = [], []
    for column, value in equal.items():
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if created_after is not None:
        where.append("created_at > ?")
        params.append(created_after)
    if created_before is not None:
        where.append("created_at < ?")
        params.append(created_before)
    if before is not None:
        where.append("(created_at < ? OR (created_at = ? AND id < ?))")
        params += [before[0], before[0], before[1]]
    return where, params

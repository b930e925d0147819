"""Tier limits (§8) and the per-customer view of them (D8, D10)."""
from __future__ import annotations

from dataclasses import dataclass

HOUR = 3600
DAY = 86400


@dataclass(frozen=True)
class Limits:
    inflight: int
    hour: int
    day: int


TIER_LIMITS = {
    "pro": Limits(inflight=3, hour=20, day=100),
    "business": Limits(inflight=10, hour=100, day=1000),
    "enterprise": Limits(inflight=25, hour=500, day=10000),
}
# The most watches not ended a customer may have, per mode (D28).
WATCH_LIMITS = {"pro": 100, "business": 1000, "enterprise": 10000}
BULK_TIERS = ("business", "enterprise")


def limits_for(customer) -> Limits:
    """The tier's defaults with the customer's overrides applied."""
    base = TIER_LIMITS[customer.tier]
    return Limits(
        inflight=customer.inflight_limit if customer.inflight_limit is not None else base.inflight,
        hour=customer.hour_limit if customer.hour_limit is not None else base.hour,
        day=customer.day_limit if customer.day_limit is not None else base.day,
    )


def watch_limit_for(customer) -> int:
    """The tier's watch limit, or the customer's override (``customers limits --watches``)."""
    return customer.watch_limit if customer.watch_limit is not None else WATCH_LIMITS[customer.tier]

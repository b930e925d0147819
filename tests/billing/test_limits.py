"""limits: the tier defaults (§8) and a customer's overrides (D8, D10)."""
from app.accounts import admin
from app.accounts.models import Customer
from app.billing import customers
from app.billing.limits import BULK_TIERS, TIER_LIMITS, Limits, limits_for
from app.scans.models import MAX_BULK_TARGETS


def test_the_tier_table_is_the_contracts():
    assert TIER_LIMITS["pro"] == Limits(inflight=3, hour=20, day=100)
    assert TIER_LIMITS["business"] == Limits(inflight=10, hour=100, day=1000)
    assert TIER_LIMITS["enterprise"] == Limits(inflight=25, hour=500, day=10000)
    assert BULK_TIERS == ("business", "enterprise")
    assert MAX_BULK_TARGETS == 100


def test_a_customer_without_overrides_gets_its_tiers_limits(conn):
    for tier, expected in TIER_LIMITS.items():
        assert limits_for(customers.create_customer(f"C {tier}", tier)) == expected


def test_overrides_replace_only_their_own_limit_and_zero_is_an_override(conn):
    cust = customers.create_customer("Overrides", "pro")
    admin.set_limits(cust.id, hour=0)
    assert limits_for(Customer.get_by_id(cust.id)) == Limits(inflight=3, hour=0, day=100)
    admin.set_limits(cust.id, inflight=7, day=5000)
    assert limits_for(Customer.get_by_id(cust.id)) == Limits(inflight=7, hour=0, day=5000)


def test_a_tier_change_moves_the_defaults_but_keeps_the_overrides(conn):
    cust = admin.set_limits(customers.create_customer("Tier", "pro").id, day=42)
    admin.set_tier(cust.id, "enterprise")
    assert limits_for(Customer.get_by_id(cust.id)) == Limits(inflight=25, hour=500, day=42)

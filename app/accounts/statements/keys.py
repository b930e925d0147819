"""API keys. The look-up by digest is one statement, the key joined to its customer,
written once (``app.plumbing.db.execute``): every call runs it."""
from __future__ import annotations

from datetime import datetime

from app.accounts.models import ApiKey, Customer
from app.plumbing.db import columns, execute, execute_named, instance, table

_KEY_FIELDS = len(ApiKey._meta.sorted_fields)
KEY_COLUMNS = f"{columns(ApiKey, 'k')}, {columns(Customer, 'c')}"
KEY_ROW_LENGTH = _KEY_FIELDS + len(Customer._meta.sorted_fields)
KEY_BY_DIGEST = (f"SELECT {KEY_COLUMNS} FROM {table(ApiKey)} AS k "
                 f"JOIN {table(Customer)} AS c ON c.id = k.customer_id WHERE k.digest = ?")


# The rules of a key row that a call must pass before it is charged, as the served read's
# statement tests them (columns unqualified: the key's CTE; named parameters ``now``,
# ``client_address`` (NULL when it is not an address: outside every block), ``scope``,
# ``any_scope``, ``billed_modes``). Each is paired with the Python predicate every other path
# runs in ``app.pipeline.KEY_RULES``, which builds the statement from these names
# (``conditions``) and whose test holds the two to agree on every case.
KEY_CONDITIONS = {
    "active": "revoked_at IS NULL",
    "unexpired": "(expires_at IS NULL OR expires_at > %(now)s)",
    "address_allowed": "(allowed_ips IS NULL OR %(client_address)s::inet <<= ANY(allowed_ips::cidr[]))",
    "scoped": "(%(scope)s::text = %(any_scope)s::text OR %(scope)s::text = ANY(scopes))",
    "billed": "livemode = ANY(%(billed_modes)s::boolean[])",
}


def conditions(names) -> str:
    """The SQL of the rules ``names`` (keys of ``KEY_CONDITIONS``), all of them holding."""
    return " AND ".join(KEY_CONDITIONS[name] for name in names)


def conditions_hold(key_ids, names, params: dict) -> dict[str, dict[str, bool]]:
    """Whether each rule of ``names`` holds for each key of ``key_ids``, as PostgreSQL evaluates
    it with ``params`` (the named parameters of ``KEY_CONDITIONS``): what the served read's
    statement decides, one rule at a time (the rule table's agreement test), keyed by key id."""
    selected = ", ".join(f"coalesce({KEY_CONDITIONS[name]}, false)" for name in names)
    rows = execute_named(f"SELECT id, {selected} FROM {table(ApiKey)} WHERE id = ANY(%(key_ids)s)",
                         {**params, "key_ids": list(key_ids)}).fetchall()
    return {row[0]: dict(zip(names, row[1:])) for row in rows}


def by_digest(token_digest: str) -> ApiKey | None:
    """The key with this digest, its ``customer`` loaded (one statement)."""
    row = execute(KEY_BY_DIGEST, (token_digest,)).fetchone()
    return None if row is None else key_from_row(row)


def key_from_row(row) -> ApiKey:
    """A key and its ``customer`` from the columns of ``KEY_COLUMNS`` (``KEY_ROW_LENGTH`` values)."""
    key = instance(ApiKey, row[:_KEY_FIELDS])
    key.customer = instance(Customer, row[_KEY_FIELDS:KEY_ROW_LENGTH])
    key._dirty.clear()
    return key


def touch(key_id: str, now: datetime) -> None:
    """Note the key's use at ``now``."""
    ApiKey.update(last_used_at=now).where(ApiKey.id == key_id).execute()


def insert(*, key_id: str, customer_id: str, name: str, digest: str, prefix: str, last4: str,
           livemode: bool, scopes: list[str], expires_at: datetime | None, allowed_ips: list[str] | None) -> ApiKey:
    return ApiKey.create(id=key_id, customer=customer_id, name=name, digest=digest, prefix=prefix, last4=last4,
                         livemode=livemode, scopes=scopes, expires_at=expires_at, allowed_ips=allowed_ips)


def narrow_access(key_id: str, changes: dict, *, scopes: list[str], expires_at: datetime | None) -> bool:
    """Write ``changes`` (as ``set_access``) only if the key still has ``scopes`` and ``expires_at``
    (compare-and-set: two narrowings at once cannot undo each other); whether it did."""
    unchanged = ApiKey.expires_at.is_null() if expires_at is None else ApiKey.expires_at == expires_at
    query = ApiKey.update({getattr(ApiKey, name): value for name, value in changes.items()})
    return query.where((ApiKey.id == key_id) & (ApiKey.scopes == scopes) & unchanged).execute() == 1


def set_access(key_id: str, changes: dict) -> None:
    """Write the key's ``scopes``, ``expires_at`` and/or ``allowed_ips`` (the keys of ``changes``)."""
    ApiKey.update({getattr(ApiKey, name): value for name, value in changes.items()}).where(
        ApiKey.id == key_id).execute()


def find(key_id: str) -> ApiKey | None:
    return ApiKey.get_or_none(ApiKey.id == key_id)


def customers_key(key_id: str, customer_id: str) -> ApiKey | None:
    """The key ``key_id`` if it is the customer's, else None."""
    return ApiKey.get_or_none((ApiKey.id == key_id) & (ApiKey.customer == customer_id))


def lock(key_id: str) -> None:
    """Lock the key's row until the transaction ends (``SELECT ... FOR UPDATE``)."""
    list(ApiKey.select(ApiKey.id).where(ApiKey.id == key_id).for_update())


def get(key_id: str) -> ApiKey:
    """The key (``ApiKey.DoesNotExist`` if there is none)."""
    return ApiKey.get_by_id(key_id)


def get_many(key_ids: set[str]) -> dict[str, ApiKey]:
    """The keys by id, in one statement (``ApiKey.DoesNotExist`` if one of them is missing). Written
    as text: every scan's ``scan.running`` event reads its key here, and peewee's query building was
    a third of that event's Python."""
    found = {}
    if key_ids:
        rows = execute(f"SELECT {columns(ApiKey)} FROM {table(ApiKey)} WHERE id = ANY(?::varchar[])", (list(key_ids),))
        found = {key.id: key for key in (instance(ApiKey, row) for row in rows.fetchall())}
    if len(found) != len(key_ids):
        raise ApiKey.DoesNotExist(f"{len(key_ids) - len(found)} of {len(key_ids)} keys do not exist")
    return found


def all_oldest_first(customer_id: str | None = None) -> list[ApiKey]:
    """Every key, oldest first, or (``customer_id``) one customer's."""
    query = ApiKey.select().order_by(ApiKey.created_at)
    if customer_id:
        query = query.where(ApiKey.customer == customer_id)
    return list(query)


def of_customer_newest_first(customer_id: str) -> list[ApiKey]:
    return list(ApiKey.select().where(ApiKey.customer == customer_id).order_by(ApiKey.created_at.desc()))


def revoke(key_id: str, now: datetime) -> None:
    """Mark the key revoked at ``now``, unless it already is."""
    ApiKey.update(revoked_at=now).where((ApiKey.id == key_id) & ApiKey.revoked_at.is_null()).execute()


def customer_modes() -> list[tuple[str, bool]]:
    """Each (customer, mode) with a key not revoked, in that order."""
    query = (ApiKey.select(ApiKey.customer, ApiKey.livemode).where(ApiKey.revoked_at.is_null()).distinct()
             .order_by(ApiKey.customer, ApiKey.livemode))
    return [(row.customer_id, row.livemode) for row in query]

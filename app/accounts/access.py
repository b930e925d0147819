"""What a key may do (D21): its scopes, its expiry and its IP allowlist, and the check every
API call runs right after authentication.

The order of the three refusals follows D3 and D21. D3 puts 401 first: a key past its expiry
no longer authenticates, so ``key_expired`` (401) comes before any 403. Of the two 403s, the
allowlist is about where the credential is used, whatever the call, and the scope about this
call: ``ip_not_allowed`` comes first, so a key used from outside its allowlist learns nothing
about its scopes. All three cost nothing (D21: like a 401, the credential may not make the call).

The served reads (``app.pipeline``) authenticate, charge and read in one statement:
that statement charges only a key these rules allow (its conditions and these predicates are
paired in ``pipeline.KEY_RULES``), and ``check`` then names the refusal.
"""
from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable
from datetime import date, datetime, time, timedelta

from app.accounts import scopes
from app.accounts.models import ApiKey
from app.accounts.statements import keys as key_store
from app.plumbing.errors import AccountError, InsufficientScope, IpNotAllowed, KeyExpired
from app.plumbing.models import iso, utcnow

log = logging.getLogger(__name__)

# The scopes' names as views declare them: D21's (``app.accounts.scopes``), read here with those the
# other domains declare in their packages once ``import app`` declared them all.
SCANS_WRITE, SCANS_READ, SCANS_ERASE = scopes.SCANS_WRITE, scopes.SCANS_READ, scopes.SCANS_ERASE
WEBHOOKS, ACTIVITY_READ = scopes.WEBHOOKS, scopes.ACTIVITY_READ
# Every scope, in the order customers read them; a key is issued with all of them unless told.
SCOPES = tuple(scope.name for scope in scopes.every_scope())
# What each allows, in the words the README, the OpenAPI document and the portal show.
SCOPE_WORDS = {scope.name: scope.words for scope in scopes.every_scope()}
# A route any active key may call, whatever its scopes (``GET /api/v1/account``).
ANY_SCOPE = "any"

MAX_ALLOWED_BLOCKS = 50
MAX_EXPIRY_DAYS = 3650  # ten years: further than that is "never", which is the default
NO_ALLOWLIST = "none"  # what ``keys set-access --allowed-ips`` takes to remove the allowlist


# --- the check of every call ----------------------------------------------------------------

def check(key: ApiKey, *, scope: str, client_address: str | None, now: datetime) -> None:
    """Raise the refusal of a call needing ``scope`` by ``key`` from ``client_address`` at
    ``now``, in D21's order (module docstring): ``KeyExpired``, ``IpNotAllowed``,
    ``InsufficientScope``; return when the key may make it."""
    refusal = refusal_of(key, scope=scope, client_address=client_address, now=now)
    if refusal is not None:
        refusal.key = key
        raise refusal


def refusal_of(key: ApiKey, *, scope: str, client_address: str | None,
               now: datetime) -> KeyExpired | IpNotAllowed | InsufficientScope | None:
    """The first of D21's refusals that applies, or None."""
    if is_expired(key, now):
        return KeyExpired("this API key has expired")
    if not address_allowed(key.allowed_ips, client_address):
        return IpNotAllowed(ip_refusal_words(client_address))
    if not has_scope(key, scope):
        return InsufficientScope(scope)
    return None


def has_scope(key: ApiKey, scope: str) -> bool:
    """Whether ``key`` carries ``scope`` (any key may make a call of ``ANY_SCOPE``)."""
    return scope == ANY_SCOPE or scope in (key.scopes or ())


def ip_refusal_words(client_address: str | None) -> str:
    """The ``ip_not_allowed`` message: it names the address the service saw (behind a proxy,
    the one ``TRUSTED_PROXIES`` makes it read), so a customer can tell a wrong allowlist from a
    proxy that hides their address. A text that is no address is not echoed."""
    address = parse_address(client_address)
    if address is None:
        return "this API key may not be used from here: the service could not read your address as an IP address"
    return f"this API key may not be used from {address}, the address this service sees for your call"


def is_expired(key: ApiKey, now: datetime) -> bool:
    """Whether ``key`` has expired at ``now`` (at its ``expires_at`` exactly, as the statement has it)."""
    return key.expires_at is not None and key.expires_at <= now


def address_allowed(blocks: list[str] | None, client_address: str | None) -> bool:
    """Whether ``client_address`` is in one of ``blocks`` (None: no allowlist, any address).
    An address that cannot be read is outside every block, as PostgreSQL's ``<<=`` has it."""
    if blocks is None:
        return True
    address = parse_address(client_address)
    return address is not None and any(address in ipaddress.ip_network(block) for block in blocks)


def parse_address(client_address: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The client's address as an address, or None for what is not one (a unix socket's peer)."""
    try:
        return ipaddress.ip_address(client_address or "")
    except ValueError:
        return None


def statement_address(client_address: str | None) -> str | None:
    """The client's address as the served read's statement takes it (``inet``), or None: a text
    PostgreSQL cannot read as an address must not fail the statement."""
    address = parse_address(client_address)
    return None if address is None else str(address)


# --- what the operator and the portal set ---------------------------------------------------

def parse_scopes(value: str | Iterable[str]) -> list[str]:
    """The scopes of ``value`` (a comma-separated text or a list), in ``SCOPES`` order;
    ``AccountError`` for an unknown one or none at all."""
    names = [s.strip() for s in (value.split(",") if isinstance(value, str) else value)]
    names = [s for s in names if s]
    unknown = [s for s in names if s not in SCOPES]
    if unknown:
        raise AccountError(f"unknown scope {unknown[0][:40]!r}: the scopes are {', '.join(SCOPES)}")
    if not names:
        raise AccountError(f"give at least one scope of {', '.join(SCOPES)}")
    return [s for s in SCOPES if s in names]


def parse_allowlist(value: str | Iterable[str] | None) -> list[str] | None:
    """The CIDR blocks of ``value`` (comma- or line-separated text, or a list; IPv4 and IPv6, an
    address alone is its own block), normalised and without repeats; None for no allowlist:
    ``value`` None (not given) or ``none`` alone. The one parser of every allowlist input (CLI,
    portal). ``AccountError`` for more than 50 blocks, or for what could widen a key's access
    by mistake: an empty value (only ``none`` removes an allowlist), a block with host bits
    set (``10.0.0.1/8``: the block meant is named) or an IPv6 zone id (``fe80::1%eth0``)."""
    if value is None:
        return None
    items = [s.strip() for s in (value.replace("\n", ",").split(",") if isinstance(value, str) else value)]
    items = [s for s in items if s]
    if not items:
        raise AccountError(f"the allowlist is empty: give IP addresses or CIDR blocks, or {NO_ALLOWLIST!r} to let "
                           f"the key be used from anywhere")
    if NO_ALLOWLIST in (s.lower() for s in items):
        if len(items) == 1:
            return None
        raise AccountError(f"{NO_ALLOWLIST!r} removes the allowlist and goes alone, not with addresses or blocks")
    blocks: list[str] = []
    for item in items:
        block = _block(item)
        if block not in blocks:
            blocks.append(block)
    if len(blocks) > MAX_ALLOWED_BLOCKS:
        raise AccountError(f"an allowlist holds at most {MAX_ALLOWED_BLOCKS} blocks, not {len(blocks)}")
    return blocks


def allowlist_text(blocks: list[str] | None) -> str:
    """An allowlist as a form shows it, one block a line, and ``none`` for no allowlist: sent back
    unchanged it reads as it was (an empty form is refused, never taken for "anywhere")."""
    return "\n".join(blocks) if blocks is not None else NO_ALLOWLIST


def _block(item: str) -> str:
    """One allowlist entry as its CIDR block, or the ``AccountError`` that names what was meant."""
    shown = item[:60]
    address, _, prefix = item.partition("/")
    if "%" in address:
        meant = address.partition("%")[0] + (f"/{prefix}" if prefix else "")
        raise AccountError(f"{shown!r} carries an IPv6 zone id (%...), which says nothing about where a call "
                           f"comes from: did you mean {meant[:60]}?")
    try:
        return str(ipaddress.ip_network(item, strict=True))
    except ValueError:
        pass
    try:
        network = ipaddress.ip_network(item, strict=False)
    except ValueError:
        raise AccountError(f"{shown!r} is not an IP address or CIDR block (e.g. 203.0.113.0/24, "
                           f"2001:db8::/32)") from None
    raise AccountError(f"{shown!r} has host bits set, so it is not a block: did you mean {network}? (or "
                       f"{ipaddress.ip_address(address)}/{network.max_prefixlen} for that address alone)")


def expiry_in_days(days: int, now: datetime) -> datetime:
    """When a key given ``days`` days from ``now`` expires; ``AccountError`` below 1 or past ten years."""
    if not isinstance(days, int) or not 1 <= days <= MAX_EXPIRY_DAYS:
        raise AccountError(f"the expiry must be a whole number of days from 1 to {MAX_EXPIRY_DAYS}")
    return now + timedelta(days=days)


def expiry_on(day: date | None, current: datetime | None) -> datetime | None:
    """The expiry a day picked in the portal means: the start of that day (UTC), except the day of
    the ``current`` expiry, which keeps it as it is (a form sent back unchanged changes nothing)."""
    if day is None:
        return None
    if current is not None and current.date() == day:
        return current
    return datetime.combine(day, time())  # naive UTC, as every time in the database


def access_of(key: ApiKey) -> dict:
    """What the key may do, as the account call, the CLI's ``--json`` and the portal show it."""
    return {"scopes": list(key.scopes or ()), "expires_at": iso(key.expires_at),
            "allowed_ips": list(key.allowed_ips) if key.allowed_ips is not None else None}


UNCHANGED = object()


def set_access(key_id: str, *, scopes: str | Iterable[str] | None = None, expires_in_days: int | None = None,
               allowed_ips=UNCHANGED) -> ApiKey:
    """The operator's change (``keys set-access``): any scopes, any expiry from now, any
    allowlist (``allowed_ips=None`` removes it); what is not given stays. Everything is
    checked before anything is written."""
    key = _key(key_id)
    changes: dict = {}
    if scopes is not None:
        changes["scopes"] = parse_scopes(scopes)
    if expires_in_days is not None:
        changes["expires_at"] = expiry_in_days(expires_in_days, utcnow())
    if allowed_ips is not UNCHANGED:
        changes["allowed_ips"] = parse_allowlist(allowed_ips)
    if not changes:
        raise AccountError("give --scopes, --expires-in-days or --allowed-ips")
    key_store.set_access(key.id, changes)
    _log_change(key.id, changes, by="operator")
    return key_store.get(key.id)


def narrow_access(key_id: str, customer_id: str, *, scopes: Iterable[str], expires_at: datetime | None,
                  allowed_ips: str | Iterable[str] | None) -> ApiKey:
    """The portal's change of one of the customer's keys: its scopes narrowed (never widened),
    its expiry kept or made earlier (never later, never removed, never in the past), its
    allowlist replaced. A refused change changes nothing."""
    key = _key(key_id)
    if key.customer_id != customer_id:
        raise LookupError("no such key")  # another customer's key is not told apart from none
    now = utcnow()
    new_scopes = parse_scopes(scopes)
    widened = [s for s in new_scopes if s not in (key.scopes or ())]
    if widened:
        raise AccountError(f"scopes can only be narrowed here: the key does not have {', '.join(widened)}")
    if expires_at is None and key.expires_at is not None:
        raise AccountError(f"the key expires at {iso(key.expires_at)}: its expiry can be made earlier, not removed")
    if expires_at is not None:
        if key.expires_at is not None and expires_at > key.expires_at:
            raise AccountError(f"the key expires at {iso(key.expires_at)}: its expiry can be made earlier, "
                               f"not later")
        if expires_at <= now:
            raise AccountError("the expiry must be in the future (revoke the key to stop it now)")
    blocks = parse_allowlist(allowed_ips)
    changes = {"scopes": new_scopes, "expires_at": expires_at, "allowed_ips": blocks}
    if not key_store.narrow_access(key.id, changes, scopes=list(key.scopes or ()), expires_at=key.expires_at):
        raise AccountError("the key's access changed meanwhile: nothing was saved, look at it again")
    _log_change(key.id, changes, by="portal")
    return key_store.get(key.id)


def _log_change(key_id: str, changes: dict, *, by: str) -> None:
    """One JSON log line per change of a key's access (D21): the scopes and expiry as set, and
    how many allowlist blocks (the portal's activity log has who; addresses stay out of logs)."""
    blocks = changes.get("allowed_ips", UNCHANGED)
    log.info("key %s access changed by the %s: scopes %s, expires %s, allowlist %s", key_id, by,
             ",".join(changes["scopes"]) if "scopes" in changes else "unchanged",
             iso(changes["expires_at"]) if changes.get("expires_at") else
             ("never" if "expires_at" in changes else "unchanged"),
             "unchanged" if blocks is UNCHANGED else "none" if blocks is None else f"{len(blocks)} block(s)")


def _key(key_id: str) -> ApiKey:
    key = key_store.find(key_id) if isinstance(key_id, str) and "\x00" not in key_id and len(key_id) <= 40 else None
    if key is None:
        raise AccountError(f"no key {key_id[:40]}")
    return key

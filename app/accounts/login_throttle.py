"""Portal login throttling: how many passwords may be tried for one account.

Two counters per attempt, both in Redis with a fixed 15-minute window that starts at
the first failure:

- per account (e-mail): at most ``MAX_PER_ACCOUNT`` unsuccessful attempts from anywhere,
  which bounds the guesses an attacker spreading over many addresses can make;
- per (client address, account): at most ``MAX_PER_ADDRESS_AND_ACCOUNT``, so one client
  gets a few tries, and other users behind the same address (an office, a load balancer)
  are never locked out by it.

An attempt reserves its slot *before* the password is checked, in one Lua script that
looks at both counters and increments both only when neither is full: parallel wrong
passwords cannot overshoot the limit, because a request refused here is never checked.
A successful login gives its slot back and clears its (address, account) counter.

When Redis is unreachable the throttle fails open: the password check still stands,
and an outage of the throttle must not lock every customer out of the portal.
No flask here: the caller passes the client address it trusts.
"""
from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

from app.plumbing import runtime

log = logging.getLogger(__name__)

MAX_PER_ACCOUNT = 20
MAX_PER_ADDRESS_AND_ACCOUNT = 5
WINDOW_SECONDS = 15 * 60
PREFIX = "portal:login"

# KEYS: the counters; ARGV: their limits, then the window. Returns 0 when the attempt may
# go ahead (both counters incremented), else the seconds until the full counter expires.
_RESERVE = """
local window = tonumber(ARGV[#ARGV])
for i, key in ipairs(KEYS) do
  local count = tonumber(redis.call('GET', key) or '0')
  if count >= tonumber(ARGV[i]) then
    local ttl = redis.call('TTL', key)
    if ttl < 0 then
      redis.call('EXPIRE', key, window)
      ttl = window
    end
    return ttl
  end
end
for _, key in ipairs(KEYS) do
  if redis.call('INCR', key) == 1 then
    redis.call('EXPIRE', key, window)
  end
end
return 0
"""

# KEYS[1]: the account's counter (one slot given back), KEYS[2]: the (address, account) one (cleared).
_RELEASE = """
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
if count > 0 then
  redis.call('DECR', KEYS[1])
end
if ARGV[1] == 'clear' then
  redis.call('DEL', KEYS[2])
elseif tonumber(redis.call('GET', KEYS[2]) or '0') > 0 then
  redis.call('DECR', KEYS[2])
end
return 0
"""


@dataclass(frozen=True)
class Attempt:
    """A reserved login attempt; ``allowed`` False means refused unchecked for ``retry_after`` s."""

    allowed: bool
    keys: tuple[str, str] | None = None  # None: the throttle was unavailable (fail open)
    retry_after: int = 0


def _account(email: str) -> str:
    # Hashed: Redis key names hold no e-mail addresses.
    return hashlib.sha256(email.strip().lower().encode()).hexdigest()[:32]


def keys_for(email: str, address: str | None) -> tuple[str, str]:
    account = _account(email)
    return f"{PREFIX}:account:{account}", f"{PREFIX}:pair:{account}:{(address or 'unknown')[:100]}"


def begin(email: str, address: str | None) -> Attempt:
    """Reserve one attempt for ``email`` from ``address``, or refuse it."""
    keys = keys_for(email, address)
    try:
        wait = int(runtime.redis().eval(_RESERVE, 2, *keys, MAX_PER_ACCOUNT, MAX_PER_ADDRESS_AND_ACCOUNT,
                                        WINDOW_SECONDS))
    except Exception:
        log.warning("login throttle unavailable (Redis); allowing the attempt")
        return Attempt(allowed=True)
    if wait:
        return Attempt(allowed=False, keys=keys, retry_after=max(1, wait))
    return Attempt(allowed=True, keys=keys)


def _release(attempt: Attempt, mode: str) -> None:
    if not attempt.allowed or attempt.keys is None:
        return
    try:
        runtime.redis().eval(_RELEASE, 2, *attempt.keys, mode)
    except Exception:
        log.warning("could not update the login throttle (Redis)")


def succeeded(attempt: Attempt) -> None:
    """The password was right: give the slot back and clear this client's counter for the account."""
    _release(attempt, "clear")


def abandoned(attempt: Attempt) -> None:
    """The attempt could not be checked (an error): it counts as nothing."""
    _release(attempt, "refund")


def clear_account(email: str) -> None:
    """Lift every lockout of ``email`` (an operator reset its password)."""
    account_key, _ = keys_for(email, None)
    try:
        conn = runtime.redis()
        pairs = list(conn.scan_iter(match=f"{PREFIX}:pair:{_account(email)}:*", count=1000))
        conn.delete(account_key, *pairs)
    except Exception:
        log.warning("could not clear the login throttle (Redis)")

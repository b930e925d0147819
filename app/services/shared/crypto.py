"""Secrets at rest and key digests.

Webhook secrets are Fernet-encrypted (AES-128-CBC + HMAC, from ``cryptography``)
with a key derived from ``SECRET_KEY`` by HKDF, so a database dump alone reveals no
secret (D11). API keys are stored only as SHA-256 digests (§5.3); targets, where only a
match is needed, as keyed hashes (``target_hash``, D20).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from app import runtime

KEY_PREFIX = "service_live_"
# Test-mode keys (D15): same length and randomness, another prefix.
TEST_KEY_PREFIX = "service_test_"
KEY_PREFIXES = (KEY_PREFIX, TEST_KEY_PREFIX)


@lru_cache(maxsize=8)
def _fernet(secret_key: str) -> Fernet:
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"public-scan-api",
                   info=b"webhook-secret-encryption").derive(secret_key.encode())
    return Fernet(base64.urlsafe_b64encode(derived))


def encrypt_secret(plaintext: str) -> str:
    return _fernet(runtime.config["SECRET_KEY"]).encrypt(plaintext.encode()).decode()


def decrypt_secret(token: str | None) -> str | None:
    if not token:
        return None
    try:
        return _fernet(runtime.config["SECRET_KEY"]).decrypt(token.encode()).decode()
    except InvalidToken:
        # SECRET_KEY changed without re-encrypting: the secret is unusable, not leaked.
        return None


@lru_cache(maxsize=8)
def _target_key(secret_key: str) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=b"public-scan-api",
                info=b"target-hash").derive(secret_key.encode())


def target_hash(kind: str, target: str) -> str:
    """The keyed hash of a normalised target (D20): HMAC-SHA256 with a key derived from
    ``SECRET_KEY``, so that a match can be found (an opt-out, "who looked this up") while the
    stored value reveals nothing, even to someone who guesses targets without the key."""
    message = f"{kind}:{target}".encode()
    return hmac.new(_target_key(runtime.config["SECRET_KEY"]), message, hashlib.sha256).hexdigest()


def digest(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


def new_api_key(livemode: bool = True) -> str:
    """``service_live_`` (or ``service_test_``) + 43 URL-safe characters (256 random bits; D10 asks for >= 32)."""
    return (KEY_PREFIX if livemode else TEST_KEY_PREFIX) + secrets.token_urlsafe(32)


def new_webhook_secret() -> str:
    """``whsec_`` + standard base64 of 32 random bytes: the form Standard Webhooks libraries take (D16)."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


@lru_cache(maxsize=8)
def _finding_key(secret_key: str) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=b"public-scan-api",
                info=b"finding-id").derive(secret_key.encode())


def finding_digest(message: str) -> bytes:
    """HMAC-SHA256 of a finding's identity (D26) with a key derived from ``SECRET_KEY``: the id
    says nothing of the item, and one customer's ids cannot be worked out from another's."""
    return hmac.new(_finding_key(runtime.config["SECRET_KEY"]), message.encode(), hashlib.sha256).digest()

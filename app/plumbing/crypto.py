"""Secrets at rest and key digests.

Webhook secrets are Fernet-encrypted (AES-128-CBC + HMAC, from ``cryptography``)
with a key derived from ``SECRET_KEY`` by HKDF, so a database dump alone reveals no
secret (D11). API keys are stored only as SHA-256 digests (§5.3); targets, where only a
match is needed, as keyed hashes (``target_hash``, D20). Event ids are sealed numbers
(``seal_number``): the sequence they come from is every customer's.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from app.plumbing import runtime

KEY_PREFIX = "service_live_"
# Test-mode keys (D15): same length and randomness, another prefix.
TEST_KEY_PREFIX = "service_test_"
KEY_PREFIXES = (KEY_PREFIX, TEST_KEY_PREFIX)
# A customer's SCIM token (D32, ``app.accounts.scim``); here beside the keys' so that what reads a
# secret's prefix (a request id that looks like one, ``app.request_ids``) needs no domain.
SCIM_TOKEN_PREFIX = "scim_"  # noqa: S105 (a prefix, not a secret)


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
    digest = _finding_hmac(runtime.config["SECRET_KEY"]).copy()
    digest.update(message.encode())
    return digest.digest()


@lru_cache(maxsize=8)
def _finding_hmac(secret_key: str):
    """The HMAC keyed for finding ids, copied for each id: a copy costs half of keying a new one,
    and a result has a dozen ids. Never updated itself (copies are: safe across threads)."""
    return hmac.new(_finding_key(secret_key), digestmod=hashlib.sha256)


_SEALED_TAG = b"scan-evt"  # the fixed half of a sealed block: a made-up text does not open


@lru_cache(maxsize=8)
def _number_cipher(secret_key: str) -> Cipher:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"public-scan-api",
               info=b"event-id").derive(secret_key.encode())
    # One AES block per number: a keyed permutation, which is all ECB is here (no two blocks of a
    # message to compare, each number its own block).
    return Cipher(algorithms.AES(key), modes.ECB())  # noqa: S305


_number_contexts = threading.local()  # each thread's (greenlet's) own: a context is not to be shared


def _number_context(secret_key: str) -> tuple:
    """This thread's encryptor and decryptor of ``_number_cipher``: making one costs ~100 us, an
    ECB block through a kept one ~10 us, and a list page seals 100 ids (never finalized: ECB
    keeps no state between blocks)."""
    held = getattr(_number_contexts, "held", None)
    if held is None or held[0] != secret_key:
        cipher = _number_cipher(secret_key)
        held = _number_contexts.held = (secret_key, cipher.encryptor(), cipher.decryptor())
    return held


def seal_number(number: int) -> str:
    """A number from 0 to 2**64 - 1 as 32 hex digits that neither reveal it nor its order (AES,
    with a key derived from ``SECRET_KEY``, of the number and a fixed tag): what a customer
    sees of a sequence shared by every customer (event ids), so it learns nothing of others'."""
    _, encryptor, _ = _number_context(runtime.config["SECRET_KEY"])
    return encryptor.update(_SEALED_TAG + number.to_bytes(8, "big")).hex()


def open_number(text: str) -> int | None:
    """The number ``seal_number`` sealed as ``text``, or None for any other text."""
    if len(text) != 32 or not all(c in "0123456789abcdef" for c in text):
        return None
    _, _, decryptor = _number_context(runtime.config["SECRET_KEY"])
    block = decryptor.update(bytes.fromhex(text))
    return int.from_bytes(block[8:], "big") if hmac.compare_digest(block[:8], _SEALED_TAG) else None

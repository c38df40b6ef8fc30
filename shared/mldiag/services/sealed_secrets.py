"""Secrets kept in the document store sealed: a webhook's signing secret, a Slack URL, a PagerDuty routing key.

A sealed value is ``fernet:<token>``, a Fernet token (AES-128-CBC and HMAC-SHA256, from ``cryptography``) under a
key derived from ``MLDIAG_NOTIFY_ENCRYPTION_KEY``: in Google Cloud a Secret Manager secret the functions that
store and deliver notifications mount (Terraform's ``notifications.encryption_key_secret_id``); with the
embedded backend, unset, a key generated once and kept in ``notifications.key`` under the data directory,
readable by its owner only. A value without the prefix is one stored before sealing: it is read as it is and
sealed when next saved. Without a key in the cloud nothing can be sealed, and a secret is refused rather than
stored in plain text.
"""

from __future__ import annotations

import base64
import functools
import hashlib

from mldiag.config import Settings
from mldiag.domain.errors import FailedPrecondition
from mldiag.domain.share_links import load_key

SEALED_PREFIX = "fernet:"
KEY_FILE = "notifications.key"


class SecretUnreadable(ValueError):
    """A sealed value that the key at hand does not open (another key, or altered)."""


class Sealer:
    """Seals and opens secrets under one key; without a key it opens plain values only and seals nothing."""

    def __init__(self, key: bytes | None):
        from cryptography.fernet import Fernet

        # Any key material of enough entropy: Fernet wants 32 bytes, base64-encoded.
        self._fernet = Fernet(base64.urlsafe_b64encode(hashlib.sha256(key).digest())) if key else None

    @property
    def can_seal(self) -> bool:
        return self._fernet is not None

    @staticmethod
    def is_sealed(value: str) -> bool:
        """Whether ``value`` is stored as it should be: sealed, or empty."""
        return not value or value.startswith(SEALED_PREFIX)

    def seal(self, value: str) -> str:
        if self.is_sealed(value):
            return value
        if self._fernet is None:
            raise FailedPrecondition("notification secrets are stored encrypted, and no key is configured: set "
                                     "MLDIAG_NOTIFY_ENCRYPTION_KEY (Terraform: notifications.encryption_key_secret_id)")
        return SEALED_PREFIX + self._fernet.encrypt(value.encode()).decode()

    def open(self, value: str) -> str:
        if not value.startswith(SEALED_PREFIX):
            return value
        from cryptography.fernet import InvalidToken

        if self._fernet is None:
            raise SecretUnreadable("a notification secret is stored encrypted, and no key is configured to read it")
        try:
            return self._fernet.decrypt(value.removeprefix(SEALED_PREFIX).encode()).decode()
        except InvalidToken:
            raise SecretUnreadable("a notification secret does not open with the configured key") from None


def sealer(settings: Settings) -> Sealer:
    """The sealer of this deployment's key (see the module's docstring for where it comes from)."""
    if settings.notify_encryption_key or settings.backend != "embedded":
        return _sealer(settings.notify_encryption_key.encode() or None)
    return _sealer(load_key(settings.data_dir, file=KEY_FILE))


@functools.cache
def _sealer(key: bytes | None) -> Sealer:
    return Sealer(key)

"""Public-key pins: a peer known by its key, not only by the CA that signed its certificate.

A certificate from the region's hub CA says whom that CA vouched for. When the CA is shared,
that is not enough to be a hub: a cert-manager ClusterIssuer signs a Certificate for any
namespace whose users may create one, and every peer that passed the internal listener's
handshake became a hub, with the storage plane (READ_ENTRY, DELETE_LEDGER) open to it. A pin
names the key itself: the SHA-256 of the certificate's SubjectPublicKeyInfo, in base64, written
``sha256/<base64>`` (as HPKP and curl's ``--pinnedpubkey`` write it). No CA can issue a
certificate for a key it does not hold, so a pinned key is only as reachable as its private
key (the Secret the hubs mount).

``KeyPins`` admits a peer certificate whose key is pinned: listed pins, and with ``own`` the
key of this hub's own certificate, for a region whose hubs share one certificate (the
operator's pools: one ``<pool>-hub-tls`` for every pod). The own key is read again whenever
its file changes; the key it replaced stays admitted for ``PREVIOUS_KEY_S``, so hubs that
loaded a new key still admit those that have not yet (a Secret's files change pod by pod,
within a minute or two). A hub that has not yet loaded the new key refuses those that have,
until it does: keys change when the hubs' Secret is made again, not at every renewal (the
operator keeps the key when it renews the certificate, and asks cert-manager to).
"""

from __future__ import annotations

import base64
import hashlib
import os

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from hedwig.clock import Clock
from hedwig.errors import UsageError

PREFIX = "sha256/"
OWN = "own"
# How long the key this hub's certificate had before is still admitted (its peers' Secrets
# are updated pod by pod, within a minute or two).
PREVIOUS_KEY_S = 600.0


def spki_pin(certificate: bytes) -> str:
    """The pin of a certificate's key (``sha256/<base64>``); DER or PEM."""
    try:
        if certificate.lstrip().startswith(b"-----BEGIN"):
            cert = x509.load_pem_x509_certificate(certificate)
        else:
            cert = x509.load_der_x509_certificate(certificate)
    except ValueError as exc:
        raise UsageError(f"not a certificate: {exc}") from exc
    spki = cert.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return PREFIX + base64.b64encode(hashlib.sha256(spki).digest()).decode()


def parse_pins(text: str) -> tuple[frozenset[str], bool]:
    """``"own, sha256/..."`` to its pins and whether ``own`` is among them; ``UsageError`` for
    anything else."""
    pins: set[str] = set()
    own = False
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        if entry == OWN:
            own = True
            continue
        if not entry.startswith(PREFIX):
            raise UsageError(f"a key pin is {OWN!r} or {PREFIX}<base64 SHA-256>, got {entry!r}")
        try:
            digest = base64.b64decode(entry[len(PREFIX) :], validate=True)
        except ValueError as exc:
            raise UsageError(f"key pin {entry!r} is not base64: {exc}") from exc
        if len(digest) != hashlib.sha256().digest_size:
            raise UsageError(f"key pin {entry!r} is not a SHA-256 (32 bytes)")
        pins.add(entry)
    return frozenset(pins), own


class KeyPins:
    """Which peer keys are admitted: ``pins``, and this hub's own (``own_cert``, a PEM file)."""

    def __init__(self, pins: frozenset[str], *, own_cert: str | None, clock: Clock) -> None:
        self._pins = pins
        self._own_cert = own_cert
        self._clock = clock
        self._own: str | None = None
        self._stamp = -1.0
        # Keys this hub's certificate had before, and until when they are still admitted.
        self._previous: dict[str, float] = {}
        self.refresh()

    @property
    def own(self) -> str | None:
        return self._own

    def refresh(self) -> None:
        """Read the own certificate again if its file changed (a half-written file is read
        at the next call)."""
        if self._own_cert is None:
            return
        try:
            stamp = os.stat(self._own_cert).st_mtime
            if stamp == self._stamp:
                return
            with open(self._own_cert, "rb") as f:
                pin = spki_pin(f.read())
        except (OSError, UsageError):
            return
        self._stamp = stamp
        if self._own is not None and pin != self._own:
            self._previous[self._own] = self._clock.monotonic() + PREVIOUS_KEY_S
        self._own = pin

    def admits(self, certificate: bytes | None) -> bool:
        """Whether the peer presenting ``certificate`` (DER) holds a pinned key."""
        if certificate is None:
            return False
        pin = spki_pin(certificate)
        if pin == self._own or pin in self._pins:
            return True
        until = self._previous.get(pin)
        if until is None:
            return False
        if self._clock.monotonic() < until:
            return True
        del self._previous[pin]
        return False

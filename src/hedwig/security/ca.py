"""A small certificate authority, with ``cryptography``: for ``hedwig dev up --secure``, the
tests, and the operator's per-pool CAs.

Keys are ECDSA P-256: as strong as RSA-3072 for a fraction of the handshake cost, which is
what a hub pays per new connection. Certificates say what they are for (server, client or
both), and a CA certificate is limited to signing end-entity certificates (path length 0).
``cryptography`` is the library every Python TLS stack already builds on; writing ASN.1 by
hand, or shelling out to ``openssl``, would be the alternatives.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Clocks drift between machines: certificates are valid from a little before they are made.
BACKDATE = datetime.timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class IssuedCertificate:
    """A certificate and its private key, PEM-encoded."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def not_after(self) -> datetime.datetime:
        return x509.load_pem_x509_certificate(self.cert_pem).not_valid_after_utc

    def write(self, directory: str | Path, name: str) -> tuple[Path, Path]:
        """Write ``NAME.crt`` and ``NAME.key`` (mode 0600) into ``directory``."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        cert, key = d / f"{name}.crt", d / f"{name}.key"
        cert.write_bytes(self.cert_pem)
        key.touch(mode=0o600)
        key.write_bytes(self.key_pem)
        return cert, key


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _load_key(key_pem: bytes) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("a Hedwig certificate's key is an EC key")
    return key


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


class CertificateAuthority:
    def __init__(self, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
        self.cert = cert
        self.key = key

    @classmethod
    def create(cls, common_name: str, *, days: int = 3650) -> CertificateAuthority:
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(_name(common_name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256())
        )
        return cls(cert, key)

    @classmethod
    def load(cls, cert_pem: bytes, key_pem: bytes) -> CertificateAuthority:
        return cls(x509.load_pem_x509_certificate(cert_pem), _load_key(key_pem))

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return _key_pem(self.key)

    def issue(
        self,
        common_name: str,
        *,
        dns_names: Iterable[str] = (),
        ip_addresses: Iterable[str] = (),
        server: bool = False,
        client: bool = False,
        days: int = 90,
        not_after: datetime.datetime | None = None,
        key_pem: bytes | None = None,
    ) -> IssuedCertificate:
        """A certificate for ``common_name``, usable as a server's (with ``dns_names`` and
        ``ip_addresses`` as its names), a client's, or both; for the key ``key_pem`` (an EC
        key, PEM: a renewal that keeps a pinned key, ``hedwig.security.pins``), else a new one."""
        if not (server or client):
            raise ValueError("a certificate is for a server, a client, or both")
        key = _key() if key_pem is None else _load_key(key_pem)
        now = datetime.datetime.now(datetime.UTC)
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        )
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(not_after or now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), False
            )
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return IssuedCertificate(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))

    def write(self, directory: str | Path, name: str = "ca") -> Path:
        """Write the CA certificate ``NAME.crt`` (the key stays in memory) and return it."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"{name}.crt"
        path.write_bytes(self.cert_pem)
        return path

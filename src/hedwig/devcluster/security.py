"""Throwaway credentials for ``hedwig dev up --secure``: CAs, certificates, a ZooKeeper digest.

Everything goes into one directory, printed by ``dev up``:

- ``hub-ca.crt``: the region's hub CA (peers on the internal listener, and what clients trust);
  ``hub.crt``/``hub.key``: the hubs' certificate (127.0.0.1 and localhost, server and client);
- ``client-ca.crt``: the CA of client certificates; ``admin.crt``/``admin.key`` (a super-user)
  and ``alice.crt``/``alice.key`` (no ACLs until you add some with ``hedwig acl``);
- ``store-ca.crt``: the metadata store's own CA, apart from the hub CA: it signs etcd's server
  certificate (``store-server.crt``/``store-server.key``) and ``store.crt``/``store.key``, the
  client certificate hubs and commands present to etcd. The ``env`` file hands that client
  certificate to every command line user, so it must open etcd's TLS and nothing else: from
  the hub CA, it passed the hubs' internal listener, whose handshake admits any certificate of
  the hub CA as a hub, and read topics' stored entries past every ACL;
  ``store-peer.crt``/``store-peer.key``: etcd's peer listener's certificate, from a CA of its
  own (``store-peer-ca.crt``; its key is never written), the only certificate that listener
  admits;
  ``etcd-root``: the password of etcd's ``root`` user (Hedwig's processes never use it);
- ``env``: ``export`` lines that make every ``hedwig`` command act as admin
  (``. DIR/env``), with the ZooKeeper digest the hubs protect their znodes with, and etcd's
  CA, client certificate and Hedwig user (used when the store is etcd).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hedwig.devcluster.etcd import EtcdSecurity
from hedwig.security.ca import CertificateAuthority, IssuedCertificate

SUPER_USER = "admin"
# The files ``create`` makes; a directory missing any is made again (keeping its digest and
# etcd credentials: a cluster on the same data directory has its znodes and users).
FILES = (
    "env",
    "hub-ca.crt",
    "hub.crt",
    "client-ca.crt",
    "store-ca.crt",
    "store-server.crt",
    "store.crt",
    "store-peer-ca.crt",
    "store-peer.crt",
    "etcd-root",
)


def _kept_env(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    kept = {}
    for line in path.read_text().splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        kept[name] = value
    return kept


@dataclass(frozen=True)
class DevSecurity:
    directory: Path
    zk_digest: str
    # USER:PASSWORD of Hedwig's etcd user
    etcd_credentials: str

    @classmethod
    def create(
        cls, directory: str | Path, *, ip_addresses: Sequence[str] = ("127.0.0.1",)
    ) -> DevSecurity:
        """Make the credentials, or reuse those a cluster on the same data directory made (its
        znodes are protected with that digest). The hubs' certificate names ``ip_addresses``
        (where the hubs listen: loopback, or each hub's address in a network lab)."""
        d = Path(directory)
        kept = _kept_env(d / "env")
        digest = kept.get("HEDWIG_ZK_DIGEST") or f"hedwig:{secrets.token_urlsafe(18)}"
        etcd = kept.get("HEDWIG_ETCD_CREDENTIALS") or f"hedwig:{secrets.token_urlsafe(18)}"
        if all((d / name).is_file() for name in FILES):
            return cls(d, digest, etcd)
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o700)
        hub_ca = CertificateAuthority.create("hedwig dev hubs", days=30)
        client_ca = CertificateAuthority.create("hedwig dev clients", days=30)
        store_ca = CertificateAuthority.create("hedwig dev metadata store", days=30)
        hub_ca.write(d, "hub-ca")
        client_ca.write(d, "client-ca")
        store_ca.write(d, "store-ca")

        def served_here(ca: CertificateAuthority, name: str, *, client: bool) -> IssuedCertificate:
            """A server's certificate for this machine's addresses (and a client's too)."""
            return ca.issue(
                name,
                ip_addresses=list(ip_addresses),
                dns_names=["localhost"],
                server=True,
                client=client,
                days=30,
            )

        served_here(hub_ca, "hub", client=True).write(d, "hub")
        for user in (SUPER_USER, "alice"):
            client_ca.issue(user, client=True, days=30).write(d, user)
        served_here(store_ca, "hedwig-store", client=False).write(d, "store-server")
        store_ca.issue("hedwig-store-client", client=True, days=30).write(d, "store")
        peer_ca = CertificateAuthority.create("hedwig dev metadata store peers", days=30)
        peer_ca.write(d, "store-peer-ca")
        served_here(peer_ca, "hedwig-store-peer", client=True).write(d, "store-peer")
        if not (d / "etcd-root").is_file():  # etcd's data directory knows it already
            (d / "etcd-root").write_text(secrets.token_urlsafe(18))
        (d / "etcd-root").chmod(0o600)
        made = cls(d, digest, etcd)
        (d / "env").write_text("".join(f"export {k}={v}\n" for k, v in made.client_env().items()))
        return made

    def path(self, name: str) -> str:
        return str(self.directory / name)

    def hub_env(self) -> dict[str, str]:
        """What each hub runs with (the internal listener's port is given per hub)."""
        return {
            "HEDWIG_TLS_CERT": self.path("hub.crt"),
            "HEDWIG_TLS_KEY": self.path("hub.key"),
            "HEDWIG_TLS_CLIENT_CA": self.path("client-ca.crt"),
            "HEDWIG_INTERNAL_CA": self.path("hub-ca.crt"),
            "HEDWIG_INTERNAL_CERT": self.path("hub.crt"),
            "HEDWIG_INTERNAL_KEY": self.path("hub.key"),
            # The hubs share hub.crt: a peer of the internal listener must hold its key.
            "HEDWIG_INTERNAL_PEER_KEYS": "own",
            "HEDWIG_AUTHENTICATE": "true",
            "HEDWIG_AUTHORIZE": "true",
            "HEDWIG_SUPER_USERS": SUPER_USER,
            "HEDWIG_ZK_DIGEST": self.zk_digest,
            **self.store_env(),
        }

    def client_env(self, user: str = SUPER_USER) -> dict[str, str]:
        return {
            "HEDWIG_TLS_CA": self.path("hub-ca.crt"),
            "HEDWIG_CERT": self.path(f"{user}.crt"),
            "HEDWIG_KEY": self.path(f"{user}.key"),
            "HEDWIG_ZK_DIGEST": self.zk_digest,
            **self.store_env(),
        }

    def store_env(self) -> dict[str, str]:
        """How a process reaches a secured etcd (``hedwig.metadata.opening``)."""
        return {
            "HEDWIG_ETCD_CA": self.path("store-ca.crt"),
            "HEDWIG_ETCD_CERT": self.path("store.crt"),
            "HEDWIG_ETCD_KEY": self.path("store.key"),
            "HEDWIG_ETCD_CREDENTIALS": self.etcd_credentials,
        }

    def etcd_security(self) -> EtcdSecurity:
        """What a development etcd is secured with."""
        user, _, password = self.etcd_credentials.partition(":")
        return EtcdSecurity(
            cert=self.path("store-server.crt"),
            key=self.path("store-server.key"),
            ca=self.path("store-ca.crt"),
            client_cert=self.path("store.crt"),
            client_key=self.path("store.key"),
            user=user,
            password=password,
            root_password=(self.directory / "etcd-root").read_text().strip(),
            peer_cert=self.path("store-peer.crt"),
            peer_key=self.path("store-peer.key"),
            peer_ca=self.path("store-peer-ca.crt"),
        )

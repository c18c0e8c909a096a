"""A real etcd secured as in production (TLS with client certificates, authentication, Hedwig's
user confined to Hedwig's prefix), with the credentials ``hedwig dev up --secure`` makes."""

from __future__ import annotations

import os

from hedwig.devcluster.etcd import EtcdServer
from hedwig.devcluster.security import DevSecurity
from hedwig.metadata import EtcdAccess


def secured_etcd(directory: str) -> tuple[DevSecurity, EtcdServer]:
    """Started; the caller stops it."""
    security = DevSecurity.create(os.path.join(directory, "security"))
    server = EtcdServer(data_dir=directory, security=security.etcd_security())
    server.start()
    return security, server


def access_files(security: DevSecurity) -> dict[str, bytes]:
    """The files of an access Secret (``EtcdAccess.from_files``) for Hedwig's user."""
    d = security.directory
    return {
        "credentials": security.etcd_credentials.encode(),
        "ca.crt": (d / "hub-ca.crt").read_bytes(),
        "tls.crt": (d / "store.crt").read_bytes(),
        "tls.key": (d / "store.key").read_bytes(),
    }


def access(security: DevSecurity) -> EtcdAccess:
    return EtcdAccess.from_files(access_files(security))

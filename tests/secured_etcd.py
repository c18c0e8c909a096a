"""A real etcd secured as in production (TLS with client certificates, authentication, Hedwig's
user confined to Hedwig's prefix), with the credentials ``hedwig dev up --secure`` makes."""

from __future__ import annotations

import os
from pathlib import Path

import grpc  # type: ignore[import-untyped]
from aetcd import rpc  # type: ignore[import-untyped]

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
        "ca.crt": (d / "store-ca.crt").read_bytes(),
        "tls.crt": (d / "store.crt").read_bytes(),
        "tls.key": (d / "store.key").read_bytes(),
    }


def access(security: DevSecurity) -> EtcdAccess:
    return EtcdAccess.from_files(access_files(security))


async def change_password(
    server: EtcdServer, security: DevSecurity, user: str, password: str
) -> None:
    """As etcd's administrator (``root``), as ``etcdctl user passwd`` does."""
    sec = security.etcd_security()
    creds = grpc.ssl_channel_credentials(
        Path(sec.ca).read_bytes(),
        Path(sec.client_key).read_bytes(),
        Path(sec.client_cert).read_bytes(),
    )
    async with grpc.aio.secure_channel(server.address, creds) as channel:
        auth = rpc.AuthStub(channel)
        token = (
            await auth.Authenticate(
                rpc.AuthenticateRequest(name="root", password=sec.root_password)
            )
        ).token
        await auth.UserChangePassword(
            rpc.AuthUserChangePasswordRequest(name=user, password=password),
            metadata=(("token", token),),
        )

"""An etcd's users and roles set up for Hedwig, as its administrator would with ``etcdctl``.

A secured etcd (TLS with client certificates, authentication on) gets a ``root`` user, one user
for Hedwig whose role may read and write only the keys under Hedwig's prefix, so a Hedwig
credential cannot touch another tenant's keys, and authentication turned on: etcd's own
``Auth`` API, called once, synchronously, by whoever starts the server (``hedwig.devcluster``).
Hedwig's processes never call it: every key they read or write is under the prefix, and they
need no other permission.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc  # type: ignore[import-untyped]
from aetcd import rpc  # type: ignore[import-untyped]

from hedwig.errors import MetadataError
from hedwig.metadata.etcd.kv import prefix_end

# Each call of the set-up gives up after this long (seconds).
ADMIN_CALL_TIMEOUT_S = 10.0
# The role Hedwig's user is given.
ROLE = "hedwig"


@dataclass(frozen=True, slots=True)
class PrefixUser:
    """A user of etcd confined to the keys under ``prefix``, and etcd's administrator's
    password."""

    user: str
    password: str
    root_password: str
    prefix: str = "/hedwig/"


def set_up_authentication(
    address: str, *, ca: bytes, cert: bytes, key: bytes, account: PrefixUser
) -> bool:
    """On the etcd at ``address`` (TLS, the client certificate ``cert`` and ``key`` of the CA
    ``ca``): the root user, ``account``'s user with a role on its prefix only, authentication
    on. False, and nothing done, if authentication was on already."""
    creds = grpc.ssl_channel_credentials(ca, key, cert)
    try:
        with grpc.secure_channel(address, creds) as channel:
            auth = rpc.AuthStub(channel)
            if auth.AuthStatus(rpc.AuthStatusRequest(), timeout=ADMIN_CALL_TIMEOUT_S).enabled:
                return False
            perm = rpc.Permission(
                permType=rpc.Permission.READWRITE,
                key=account.prefix.encode(),
                range_end=prefix_end(account.prefix.encode()),
            )
            for call, request in (
                (auth.UserAdd, rpc.AuthUserAddRequest(name="root", password=account.root_password)),
                (auth.UserGrantRole, rpc.AuthUserGrantRoleRequest(user="root", role="root")),
                (auth.RoleAdd, rpc.AuthRoleAddRequest(name=ROLE)),
                (
                    auth.RoleGrantPermission,
                    rpc.AuthRoleGrantPermissionRequest(name=ROLE, perm=perm),
                ),
                (
                    auth.UserAdd,
                    rpc.AuthUserAddRequest(name=account.user, password=account.password),
                ),
                (auth.UserGrantRole, rpc.AuthUserGrantRoleRequest(user=account.user, role=ROLE)),
                (auth.AuthEnable, rpc.AuthEnableRequest()),
            ):
                call(request, timeout=ADMIN_CALL_TIMEOUT_S)
    except grpc.RpcError as exc:
        raise MetadataError(f"setting up etcd's authentication at {address}: {exc}") from exc
    return True

from __future__ import annotations

import contextlib
import shutil
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hedwig.client import HedwigClient, RetryPolicy
from hedwig.hub import Hub, HubConfig
from hedwig.metadata import MetadataStore
from hedwig.metadata.memory import MemoryBackend, MemoryMetadataStore
from hedwig.security import ClientSecurity
from hedwig.settings import (
    BalanceSettings,
    ConnectionSettings,
    SecuritySettings,
    StorageSettings,
    changed,
)
from tests import scratch
from tests.security.fixtures import Pki, TokenIssuer

FAST_RETRY = RetryPolicy(initial_delay_s=0.01, max_delay_s=0.1, deadline_s=10)


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def issuer() -> Iterator[TokenIssuer]:
    it = TokenIssuer()
    yield it
    it.close()


def secure_config(pki: Pki, issuer: TokenIssuer, **kw: object) -> HubConfig:
    base = HubConfig(
        connection=ConnectionSettings(listen="127.0.0.1:0", metadata_session_timeout_s=2.0),
        storage=StorageSettings(data_dir=scratch.mkdtemp("sec-"), replication="2/2/2"),
        balance=BalanceSettings(self_balance=False),
        security=SecuritySettings(
            tls_cert=pki.path("hub.crt"),
            tls_key=pki.path("hub.key"),
            tls_client_ca=pki.path("client-ca.crt"),
            internal_listen="127.0.0.1:0",
            internal_ca=pki.path("hub-ca.crt"),
            internal_cert=pki.path("hub.crt"),
            internal_key=pki.path("hub.key"),
            authenticate=True,
            authorize=True,
            super_users="admin",
            token_issuers=issuer.issuers_json(),
        ),
    )
    return changed(base, **kw)


@dataclass
class SecureRegion:
    pki: Pki
    issuer: TokenIssuer
    backend: MemoryBackend
    hubs: list[Hub] = field(default_factory=list)

    @property
    def addresses(self) -> list[str]:
        return [h.address for h in self.hubs]

    def security(self, *, token_for: str | None = None, cert: str | None = None) -> ClientSecurity:
        return ClientSecurity.build(
            tls_ca=self.pki.path("hub-ca.crt"),
            token=self.issuer.token(token_for) if token_for else None,
            cert=self.pki.path(f"{cert}.crt") if cert else None,
            key=self.pki.path(f"{cert}.key") if cert else None,
        )

    def client(self, **kw: object) -> HedwigClient:
        kw.setdefault("retry", FAST_RETRY)
        return HedwigClient(self.addresses, **kw)  # type: ignore[arg-type]

    def store(self) -> MemoryMetadataStore:
        return MemoryMetadataStore(self.backend, "mem")


@contextlib.asynccontextmanager
async def running_hubs(
    hubs: list[Hub], configs: Iterable[HubConfig], store: Callable[[], MetadataStore]
) -> AsyncIterator[list[Hub]]:
    """A hub started for each of ``configs``, each on a store of its own (``store()``) and
    added to ``hubs`` as it starts; after the body, every hub of ``hubs`` stopped and its data
    deleted."""
    for config in configs:
        hub = Hub(config, store=store())
        await hub.start()
        hubs.append(hub)
    try:
        yield hubs
    finally:
        for hub in hubs:
            await hub.stop()
            shutil.rmtree(hub.config.storage.data_dir, ignore_errors=True)


@pytest.fixture
async def secure(pki: Pki, issuer: TokenIssuer) -> AsyncIterator[SecureRegion]:
    region = SecureRegion(pki, issuer, MemoryBackend())
    async with running_hubs(
        region.hubs, (secure_config(pki, issuer) for _ in range(2)), region.store
    ):
        yield region


async def consumed_and_closed(
    client: HedwigClient, topic: str, subscriber: str, published: int, consumed: int
) -> None:
    """``published`` messages on ``topic``, of which ``subscriber`` consumed the first
    ``consumed``, its subscription then closed (its mark flushed)."""
    sub = await client.subscribe(topic, subscriber)
    for i in range(published):
        await client.publish(topic, b"m%d" % i)
    for _ in range(consumed):
        msg = await sub.next(5)
    sub.consume(msg.seq)
    await client.close_subscription(topic, subscriber)


def files_under(directory: str) -> dict[str, bytes]:
    root = Path(directory)
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}

"""The probe suite: every frame type the protocol has, sent by everyone who should be refused.

Two secured hubs (TLS, tokens, client certificates, ACLs, an internal listener with the hub
CA) hold a topic with messages, ledgers and a subscription. Then, from (a) an anonymous
connection, (b) a token and (c) a client certificate with no ACLs, every request type is sent
to the client listener; (d) expired, wrong-audience, unknown-key and bad-signature tokens, a
certificate from another CA and a plaintext client try to get in; (e) a client certificate, a
token and a foreign "hub" certificate try the internal listener. Every attempt is refused with
the status it should be, and afterwards the hubs' ledger files and every metadata record are
byte for byte what they were, and the data reads back whole.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from hedwig.errors import (
    AuthenticationError,
    ForbiddenError,
    HedwigError,
    InternalOnlyError,
    TlsError,
)
from hedwig.net.connection import HubConnection
from hedwig.net.transport import TCP, TcpNetwork
from hedwig.protocol import (
    Ack,
    AddEntry,
    Authenticate,
    CloseSubscription,
    Consume,
    CreateSubscription,
    DeleteLedger,
    DeleteTopic,
    DeliveryStats,
    DescribeLanes,
    DescribeLinks,
    DescribeQueues,
    DescribeRegion,
    DescribeTopic,
    EncodedMessages,
    FenceLedgers,
    HubAlive,
    JoinSubscription,
    LedgerLac,
    Nack,
    Ping,
    Publish,
    Read,
    ReadEntry,
    ReadLac,
    ReleaseBundle,
    ReleaseTopic,
    Request,
    ResetSubscription,
    ResetTo,
    SeqRange,
    StorageHello,
    Subscribe,
    SubscriptionType,
    TailTopic,
    TopicStats,
    Unsubscribe,
    WriteLacs,
    encode_values,
)
from hedwig.protocol.codec import FRAME_TYPES, STORAGE_REQUESTS
from hedwig.protocol.schema import Sender
from hedwig.protocol.wire import HEADER, PROTOCOL_VERSION
from hedwig.security import ClientSecurity, StaticToken
from hedwig.security.tls import client_context
from tests.security.conftest import SecureRegion, consumed_and_closed, files_under

Probe = Callable[[int], Request]


def _evil_publish(topic: str) -> Probe:
    """A PUBLISH of one message to ``topic`` (a topic with data, or a new one)."""
    return lambda r: Publish(
        request_id=r,
        topic=topic,
        publisher_id="evil",
        publisher_seq=0,
        messages=EncodedMessages(count=1, payload=encode_values([b"evil"])),
    )


def probes(ledger_id: int) -> list[Probe]:
    """One or more requests of every type a client can send, aimed at real data."""
    return [
        _evil_publish("probe"),
        _evil_publish("brand-new"),
        lambda r: Subscribe(request_id=r, topic="probe", subscriber="s1", force_attach=True),
        lambda r: Consume(request_id=r, topic="probe", subscriber="s1", seq=20),
        lambda r: Unsubscribe(request_id=r, topic="probe", subscriber="s1"),
        lambda r: CloseSubscription(request_id=r, topic="probe", subscriber="s1"),
        lambda r: Read(
            request_id=r, topic="probe", start_seq=0, max_messages=100, max_bytes=1 << 20
        ),
        lambda r: TopicStats(request_id=r, topic="probe", redirected=True),
        lambda r: ReleaseTopic(request_id=r, topic="probe"),
        # (for the region's super-users only, whatever the ACLs grant)
        lambda r: ReleaseBundle(request_id=r, bundle="00000000_ffffffff", destination="h:1"),
        lambda r: DeleteTopic(request_id=r, topic="probe", force=True),
        lambda r: ResetSubscription(
            request_id=r, topic="probe", subscriber="s1", to=ResetTo.EARLIEST
        ),
        lambda r: DescribeTopic(request_id=r, topic="probe"),
        lambda r: AddEntry(
            request_id=r, ledger_id=ledger_id, entry_id=0, lac=-1, payload=b"x", recovery=True
        ),
        lambda r: ReadEntry(request_id=r, ledger_id=ledger_id, entry_id=0),
        lambda r: ReadLac(request_id=r, ledger_id=ledger_id, fence=True),
        lambda r: FenceLedgers(request_id=r, ledger_ids=(ledger_id,)),
        lambda r: DeleteLedger(request_id=r, ledger_id=ledger_id),
        lambda r: WriteLacs(request_id=r, lacs=(LedgerLac(ledger_id, 1_000_000),)),
        lambda r: StorageHello(request_id=r, replica="hub-anyone"),
        lambda r: HubAlive(request_id=r, address="127.0.0.1:1", epoch=1),
        lambda r: TailTopic(
            request_id=r, topic="probe", after_seq=0, max_messages=100, max_bytes=1 << 20, wait_ms=0
        ),
        lambda r: DeliveryStats(request_id=r, topic="probe"),
        lambda r: DescribeLanes(request_id=r, topic="probe"),
        lambda r: Ping(request_id=r),
        lambda r: DescribeRegion(request_id=r),
        lambda r: DescribeLinks(request_id=r),
        lambda r: JoinSubscription(
            request_id=r, topic="probe", subscriber="q1", type=SubscriptionType.SHARED
        ),
        lambda r: CreateSubscription(
            request_id=r, topic="probe", subscriber="q2", type=SubscriptionType.SHARED
        ),
        lambda r: Ack(request_id=r, topic="probe", subscriber="s1", ranges=(SeqRange(1, 20),)),
        lambda r: Nack(
            request_id=r, topic="probe", subscriber="s1", delay_ms=0, ranges=(SeqRange(1, 20),)
        ),
        lambda r: DescribeQueues(request_id=r, topic="probe"),
        lambda r: Authenticate(request_id=r, mechanism="token", credentials="not-a-token"),
    ]


def test_the_probes_cover_every_request_type() -> None:
    sent = {type(p(1)) for p in probes(1)}
    assert sent == {cls for cls in FRAME_TYPES if cls.SENDER is Sender.CLIENT}


async def seed(region: SecureRegion) -> int:
    """20 messages on ``probe``, a subscription that consumed 5, marks flushed; the ledger id."""
    async with region.client(security=region.security(token_for="admin")) as admin:
        await consumed_and_closed(admin, "probe", "s1", 20, 5)
    for hub in region.hubs:
        for owned in hub.topics.topics.values():
            await owned.flush_marks()
    store = region.store()
    await store.start()
    ranges = await store.persistence.read_topic_persistence_info("probe")
    assert ranges is not None
    return ranges.value.ranges[-1].ledger_id


def snapshot(region: SecureRegion) -> dict[str, object]:
    """Every ledger file of every hub, and every metadata record but the load reports."""
    state: dict[str, object] = {}
    for i, hub in enumerate(region.hubs):
        for name, data in files_under(hub.config.storage.data_dir).items():
            state[f"hub{i}/{name}"] = data
    for key, entry in region.backend.data.items():
        if "alive" not in key:
            value = entry.value
            raw = value.to_json() if hasattr(value, "to_json") else repr(value)
            state["/".join(key)] = (raw, entry.version)
    return state


async def expect_refused(conn: HubConnection, probe: Probe, *errors: type[HedwigError]) -> None:
    frame = probe(conn.next_id())
    with pytest.raises(errors):
        await conn.request(frame, timeout=5)


async def connect(
    address: str, security: ClientSecurity, *, authenticate: bool = True
) -> HubConnection:
    network = TcpNetwork(client_tls=security.tls) if security.tls else TCP
    return await HubConnection.open(
        address, network=network, credentials=security.credentials if authenticate else None
    )


async def ping(address: str, security: ClientSecurity, *, authenticate: bool = True) -> None:
    conn = await connect(address, security, authenticate=authenticate)
    try:
        await conn.request(Ping(request_id=conn.next_id()), timeout=5)
    finally:
        conn.close()


async def closes_on_frame_type(address: str, security: ClientSecurity, frame_type: int) -> None:
    """Send a header of ``frame_type`` (a hub's frame) and wait for the hub to hang up."""
    conn = await connect(address, security)
    closed: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    def on_close(_: HubConnection) -> None:
        if not closed.done():
            closed.set_result(True)

    conn._on_close = on_close
    assert conn._transport is not None
    conn._transport.write(HEADER.pack(8, PROTOCOL_VERSION, frame_type, 0, 1))
    await asyncio.wait_for(closed, 5)


async def test_every_frame_from_everyone_refused_and_nothing_changes(
    secure: SecureRegion,
) -> None:
    ledger_id = await seed(secure)
    owner = next(h for h in secure.hubs if "probe" in h.topics.topics)
    other = next(h for h in secure.hubs if h is not owner)
    before = snapshot(secure)
    storage = STORAGE_REQUESTS
    # What replicas hold in memory only (the LAC a writer tells them once its topic is idle)
    # is not in the files: once the owner has told them, a probe must not change it.
    async with asyncio.timeout(10):
        while True:
            lacs_before = [await h.storage.read_lac(ledger_id, fence=False) for h in secure.hubs]
            if all(lac == last for lac, last in lacs_before):
                break
            await asyncio.sleep(0.05)

    # (a) anonymous, (b) a token and (c) a certificate without ACLs, at both hubs.
    attackers = {
        "anonymous": secure.security(),
        "token": secure.security(token_for="mallory"),
        "certificate": secure.security(cert="alice"),
    }
    for who, security in attackers.items():
        for hub in (owner, other):
            conn = await connect(hub.address, security)
            for probe in probes(ledger_id):
                if who == "anonymous":
                    # An unauthenticated connection is closed after its third refusal
                    # (``hedwig.hub.front.doorway``): each probe comes on a new one.
                    conn.close()
                    conn = await connect(hub.address, security)
                kind = type(probe(1))
                if kind in storage:
                    await expect_refused(conn, probe, InternalOnlyError)
                elif kind is Authenticate or who == "anonymous":
                    await expect_refused(conn, probe, AuthenticationError)
                elif kind in (Ping, DescribeRegion):
                    # Harmless, allowed to any identity: DESCRIBE_REGION names the region's
                    # hubs, which every client is redirected to anyway.
                    await conn.request(probe(conn.next_id()), timeout=5)
                else:
                    await expect_refused(conn, probe, ForbiddenError)
            conn.close()

    # Frames only hubs send, from a client: the connection is closed.
    for cls in FRAME_TYPES:
        if cls.SENDER is Sender.HUB:
            await closes_on_frame_type(owner.address, attackers["token"], cls.TYPE)

    # (d) credentials that prove nothing.
    bad_tokens = {
        "has expired": secure.issuer.token("admin", expires_in_s=-120),
        "not for audience": secure.issuer.token("admin", audience="someone-else"),
        "a key issuer .* does not publish": secure.issuer.token(
            "admin", kid="key-2", key=_other_key()
        ),
        "signature does not verify": secure.issuer.token("admin", key=_other_key()),
        "issuer 'https://elsewhere.example' are not trusted": secure.issuer.token(
            "admin", issuer="https://elsewhere.example"
        ),
    }
    for why, token in bad_tokens.items():
        with pytest.raises(AuthenticationError, match=why):
            await HubConnection.open(
                owner.address,
                network=TcpNetwork(client_tls=secure.security().tls),
                credentials=StaticToken(token),
            )
    foreign = ClientSecurity.build(
        tls_ca=secure.pki.path("hub-ca.crt"),
        cert=secure.pki.path("foreign-alice.crt"),
        key=secure.pki.path("foreign-alice.key"),
    )
    with pytest.raises(TlsError):
        await ping(owner.address, foreign)
    # A plaintext client on the TLS port is told so at once.
    conn = await HubConnection.open(owner.address)
    with pytest.raises(AuthenticationError, match="TLS"):
        await conn.request(Ping(request_id=conn.next_id()), timeout=5)
    conn.close()

    # (e) the internal listener: a client certificate, a token, another CA's "hub".
    internal = owner.internal_address
    outsiders = [
        ClientSecurity.build(
            tls_ca=secure.pki.path("hub-ca.crt"),
            cert=secure.pki.path("alice.crt"),
            key=secure.pki.path("alice.key"),
        ),
        secure.security(token_for="admin"),
        ClientSecurity.build(
            tls_ca=secure.pki.path("hub-ca.crt"),
            cert=secure.pki.path("foreign-hub.crt"),
            key=secure.pki.path("foreign-hub.key"),
        ),
    ]
    for security in outsiders:
        with pytest.raises(TlsError):
            await ping(internal, security, authenticate=False)

    # Nothing changed: files and records byte for byte, and the data reads back whole.
    assert snapshot(secure) == before
    assert [await hub.storage.read_lac(ledger_id, fence=False) for hub in secure.hubs] == (
        lacs_before
    )
    async with secure.client(security=secure.security(token_for="admin")) as admin:
        got = await admin.read("probe", 0)
        values = [m.value for b in got.batches for m in b.delivered()]
        assert values == [b"m%d" % i for i in range(20)]
    denied = owner.metrics.auth_denied
    assert denied.labels("publish", "forbidden")._value.get() > 0
    assert denied.labels("add_entry", "internal_only")._value.get() > 0
    assert denied.labels("write_lacs", "internal_only")._value.get() > 0
    for reason in ("expired", "audience", "unknown_key", "signature", "issuer"):
        assert denied.labels("authenticate", reason)._value.get() > 0, reason


def _other_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def test_client_contexts_refuse_tls_before_1_2(secure: SecureRegion) -> None:
    ctx = client_context(secure.pki.path("hub-ca.crt"))
    assert ctx.minimum_version.name == "TLSv1_2"

"""What authenticated connections may hold in frames they have not finished
(``hedwig.hub.front.unfinished``).

Twenty connections of one tenant, each holding all but the last byte of a 16 MiB frame, took a
hub from 85 to 416 MB for as long as they stayed. Against a secured hub in this process with
tight bounds: a principal's second unfinished frame past its budget closes that connection
alone; another principal's frame past the hub's budget closes that one; the frames left
unfinished are closed on time; each closure is counted by reason, nothing is left held, and a
client publishing normally is not touched. And the budget's rules on a manual clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hedwig.clock import ManualClock
from hedwig.hub.front.doorway import Doorway
from hedwig.hub.front.unfinished import UnfinishedFrames, UnfinishedLimits
from hedwig.hub.reporting.disconnects import Disconnect
from hedwig.metadata.memory import MemoryBackend
from hedwig.protocol import Authenticate, Authenticated
from hedwig.protocol.codec import encode_frame
from hedwig.protocol.wire import HEADER, PROTOCOL_VERSION
from tests.security.conftest import SecureRegion, running_hubs, secure_config
from tests.security.fixtures import Pki, TokenIssuer
from tests.security.test_doorway import PUBLISH, Raw, closed_count

KIB = 1024
MIB = 1024 * KIB


@pytest.fixture
async def budgeted(pki: Pki, issuer: TokenIssuer) -> AsyncIterator[SecureRegion]:
    """One secured hub whose unfinished frames may hold 1 MiB a principal, 1.5 MiB in all,
    for 2 s."""
    region = SecureRegion(pki, issuer, MemoryBackend())
    config = secure_config(
        pki,
        issuer,
        replication="1/1/1",
        unfinished_frame_bytes_per_principal=MIB,
        unfinished_frame_bytes=MIB + MIB // 2,
        unfinished_frame_timeout_s=2.0,
    )
    async with running_hubs(region.hubs, [config], region.store):
        yield region


async def signed_in(region: SecureRegion, who: str) -> Raw:
    raw = await Raw.open(region)
    token = region.issuer.token(who)
    raw.writer.write(encode_frame(Authenticate(request_id=1, mechanism="token", credentials=token)))
    assert isinstance(await raw.answer(), Authenticated)
    return raw


def begin_frame(raw: Raw, body: int) -> None:
    """The header of a 4 MiB PUBLISH and ``body`` bytes of it, never the rest."""
    raw.writer.write(HEADER.pack(4 * MIB - 4, PROTOCOL_VERSION, PUBLISH, 0, 9))
    raw.writer.write(b"\x00" * body)


async def test_unfinished_frames_are_bounded_by_principal_in_all_and_in_time(
    budgeted: SecureRegion,
) -> None:
    hub = budgeted.hubs[0]
    first = await signed_in(budgeted, "mallory")
    begin_frame(first, 600 * KIB)
    assert not await first.closed_within(0.5), "a frame within the budget was refused"
    second = await signed_in(budgeted, "mallory")
    begin_frame(second, 600 * KIB)  # mallory's two: 1.2 MiB, over its 1 MiB
    assert await second.closed_within(3), "a principal went past its budget"
    assert not await first.closed_within(0.1)  # the first holds what it held
    other = await signed_in(budgeted, "alice")
    begin_frame(other, 600 * KIB)  # 1.2 MiB in all: under the hub's 1.5 MiB
    assert not await other.closed_within(0.3)
    third = await signed_in(budgeted, "bob")
    begin_frame(third, 600 * KIB)  # 1.8 MiB in all: over
    assert await third.closed_within(3), "the hub went past its budget"
    assert closed_count(budgeted, Disconnect.UNFINISHED_BYTES) == 2
    # Left unfinished, the other two are closed on time.
    assert await first.closed_within(4) and await other.closed_within(1)
    assert closed_count(budgeted, Disconnect.UNFINISHED_TIMEOUT) == 2
    door = hub.front.doorway
    assert isinstance(door, Doorway) and door.unfinished.total == 0
    # A client publishing large messages as a client does is not touched.
    async with budgeted.client(security=budgeted.security(token_for="admin")) as admin:
        for _ in range(5):
            await admin.publish("big", b"x" * (900 * KIB))
    assert closed_count(budgeted, Disconnect.UNFINISHED_BYTES) == 2


def test_the_budget_counts_each_principal_and_all_and_forgets_what_finished() -> None:
    clock = ManualClock()
    budget: UnfinishedFrames[str] = UnfinishedFrames(
        UnfinishedLimits(per_principal=100, in_all=150, timeout_s=10.0), clock=clock
    )
    assert budget.hold("c1", "p", 60) is None
    assert budget.hold("c1", "p", 60) is None  # nothing new
    assert "over its 100" in (budget.hold("c2", "p", 50) or "")
    budget.release("c2")
    assert (budget.of("p"), budget.total) == (60, 60)
    assert budget.hold("c3", "q", 80) is None
    assert "over the hub's 150" in (budget.hold("c4", "r", 20) or "")
    budget.release("c4")
    # A frame that finished is forgotten; one that shrinks (a frame done, the next begun
    # smaller) is never refused.
    assert budget.hold("c3", "q", 0) is None and budget.of("q") == 0
    assert budget.hold("c1", "p", 10) is None and budget.total == 10
    # The principal is the one the frame began under.
    assert budget.hold("c1", "other", 30) is None
    assert (budget.of("p"), budget.of("other")) == (30, 0)
    clock.advance(9)
    assert budget.overdue() == []
    assert budget.hold("c5", "q", 5) is None
    assert budget.hold("c6", "q", 5) is None
    clock.advance(1)
    assert budget.overdue() == ["c1"]
    # A frame finished and the next begun in one read: its time runs from now, under the
    # principal the connection has now.
    assert budget.hold("c1", "other", 40, fresh=True) is None
    assert (budget.of("p"), budget.of("other")) == (0, 40)
    assert budget.overdue() == []
    clock.advance(10)
    assert sorted(budget.overdue()) == ["c1", "c5", "c6"]
    budget.release("c6")
    budget.release("c1")
    budget.release("c5")
    assert budget.total == 0 and budget.of("p") == 0 and budget.overdue() == []

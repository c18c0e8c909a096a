"""Refusals cost the log a bounded line at a bounded rate, and an anonymous connection that
keeps being refused is closed.

Refused requests were written to the audit log whole, whatever their topic name (checked only
later, by the handler) or a token's claims held, escaped: an anonymous client's refused
requests were logged at up to 26 times their size, one line each, as fast as it sent them.
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from hedwig.errors import AuthenticationError, ForbiddenError
from hedwig.hub.front.audit import BURST, FIELD_CHARS
from hedwig.hub.reporting.disconnects import Disconnect
from hedwig.net.connection import HubConnection
from hedwig.net.transport import TcpNetwork
from hedwig.protocol import Authenticate, EncodedMessages, Error, Ping, Publish, encode_values
from hedwig.protocol.codec import encode_frame
from hedwig.security import StaticToken
from tests.security.conftest import SecureRegion
from tests.security.test_doorway import Raw


def audit_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "hedwig.audit"]


def publish(request_id: int, topic: str) -> Publish:
    return Publish(
        request_id=request_id,
        topic=topic,
        publisher_id="mallory",
        publisher_seq=0,
        messages=EncodedMessages(count=1, payload=encode_values([b"x"])),
    )


async def test_a_refusal_is_logged_with_its_fields_cut_short(
    secure: SecureRegion, caplog: pytest.LogCaptureFixture
) -> None:
    conn = await HubConnection.open(
        secure.hubs[0].address,
        network=TcpNetwork(client_tls=secure.security().tls),
        credentials=StaticToken(secure.issuer.token("mallory")),
    )
    topic = "\x7f" * 20_000  # escaped, each was 6 characters in the line and 5 in its message
    with (
        caplog.at_level(logging.INFO, logger="hedwig.audit"),
        pytest.raises(ForbiddenError) as refused,
    ):
        await conn.request(publish(conn.next_id(), topic), timeout=5)
    conn.close()
    # The client is told too, as briefly.
    assert str(refused.value).startswith("principal mallory may not publish topic '\\x7f")
    assert str(refused.value).endswith(f"...[{20_000 - FIELD_CHARS} more characters]'")
    (line,) = [r for r in caplog.records if "denied" in r.getMessage()]
    text = line.getMessage()
    assert len(text.encode()) < 2_000, len(text)
    denied = json.loads(text)
    assert denied["topic"] == "\x7f" * FIELD_CHARS + f"...[{20_000 - FIELD_CHARS} more characters]"
    assert denied["principal"] == "mallory" and denied["reason"] == "forbidden"


async def test_a_connections_refusals_are_logged_at_a_bounded_rate(
    secure: SecureRegion, caplog: pytest.LogCaptureFixture
) -> None:
    sent = 300
    with caplog.at_level(logging.INFO, logger="hedwig.audit"):
        conn = await HubConnection.open(
            secure.hubs[0].address,
            network=TcpNetwork(client_tls=secure.security().tls),
            credentials=StaticToken(secure.issuer.token("mallory")),
        )
        answers = await asyncio.gather(
            *(conn.request(publish(conn.next_id(), f"t{i}"), timeout=10) for i in range(sent)),
            return_exceptions=True,
        )
        assert all(isinstance(a, ForbiddenError) for a in answers)
        conn.close()
        async with asyncio.timeout(5):
            while not any(line.get("event") == "suppressed" for line in audit_lines(caplog)):
                await asyncio.sleep(0.05)
    lines = audit_lines(caplog)
    denied = [line for line in lines if line["event"] == "denied"]
    # The burst (its first line said it authenticated), and a line a second after it (this
    # took well under a few seconds).
    assert lines[0]["event"] == "authenticated"
    assert BURST - 1 <= len(denied) <= BURST + 5, len(denied)
    (last,) = [line for line in lines if line["event"] == "suppressed"]
    suppressed = sum(int(str(line.get("suppressed", 0))) for line in lines)
    assert len(denied) + suppressed == sent
    assert last["principal"] == "mallory"
    assert secure.hubs[0].metrics.auth_denied.labels("publish", "forbidden")._value.get() == sent


async def test_an_anonymous_connection_is_closed_after_a_few_refusals(
    secure: SecureRegion,
) -> None:
    raw = await Raw.open(secure)
    raw.writer.write(b"".join(encode_frame(Ping(request_id=i)) for i in range(1, 11)))
    answers = [await raw.answer() for _ in range(3)]
    assert [a.request_id for a in answers if isinstance(a, Error)] == [1, 2, 3]
    assert await raw.closed_within(3)
    counter = secure.hubs[0].metrics.connections_closed.labels(Disconnect.REFUSALS.value)
    assert counter._value.get() == 1
    # A client whose token is refused stops at its first UNAUTHENTICATED: never retried.
    with pytest.raises(AuthenticationError):
        await HubConnection.open(
            secure.hubs[0].address,
            network=TcpNetwork(client_tls=secure.security().tls),
            credentials=StaticToken("not-a-token"),
        )
    # Refused AUTHENTICATE frames count too.
    raw = await Raw.open(secure)
    bad = Authenticate(request_id=1, mechanism="token", credentials="not-a-token")
    raw.writer.write(encode_frame(bad) * 5)
    assert await raw.closed_within(3)

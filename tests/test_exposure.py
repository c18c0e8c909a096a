"""Which listeners are open to the network, and when ``hedwig hub`` refuses to start."""

from __future__ import annotations

import pytest

from hedwig.errors import UsageError
from hedwig.settings import ConnectionSettings, HubConfig, SecuritySettings
from hedwig.settings.exposure import (
    check_exposure,
    exposed_listeners,
    is_loopback,
    open_listeners,
)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1:4080",
        "127.1.2.3:0",
        "localhost:4080",
        "LOCALHOST.:4080",
        "hub.localhost:4080",
        "::1:4080",
        "[::1]:4080",
        "::ffff:127.0.0.1:4080",
    ],
)
def test_loopback(address: str) -> None:
    assert is_loopback(address)


@pytest.mark.parametrize(
    "address",
    [
        "0.0.0.0:4080",
        ":::4080",
        "[::]:4080",
        ":4080",
        "10.0.0.5:4080",
        "192.168.1.1:4080",
        "::ffff:10.0.0.1:4080",
        "fe80::1%eth0:4080",
        "hub-0.hub.ns.svc:4080",
        "localhost.example.com:4080",
        "127.0.0.1.nip.io:4080",
        "memory:0",
        "",
    ],
)
def test_not_loopback(address: str) -> None:
    assert not is_loopback(address)


def _secured(**overrides: object) -> SecuritySettings:
    values: dict[str, object] = {
        "tls_cert": "c.pem",
        "tls_key": "k.pem",
        "tls_client_ca": "ca.pem",
        "authenticate": True,
        "internal_listen": "0.0.0.0:4081",
        "internal_ca": "hub-ca.pem",
        "internal_cert": "i.pem",
        "internal_key": "ik.pem",
    }
    values.update(overrides)
    return SecuritySettings(**values)  # type: ignore[arg-type]


def _config(listen: str, security: SecuritySettings | None = None, **conn: object) -> HubConfig:
    return HubConfig(
        connection=ConnectionSettings(listen=listen, **conn),  # type: ignore[arg-type]
        security=security or SecuritySettings(),
    )


def test_a_bare_hub_on_loopback_is_open_but_not_exposed() -> None:
    config = _config("127.0.0.1:4080")
    (client,) = open_listeners(config)
    assert client.name == "client"
    assert "no TLS, no authentication; ledgers served on it too" in str(client)
    assert exposed_listeners(config) == []
    assert check_exposure(config) == []


def test_a_bare_hub_on_every_interface_is_refused_saying_what_is_open() -> None:
    with pytest.raises(UsageError) as info:
        check_exposure(_config("0.0.0.0:4080"))
    text = str(info.value)
    assert "the client listener 0.0.0.0:4080 (no TLS, no authentication" in text
    assert "read and delete topics and ledgers" in text
    assert "--insecure" in text


def test_insecure_allows_it_and_names_it() -> None:
    config = _config("0.0.0.0:4080", SecuritySettings(insecure=True))
    assert [o.name for o in check_exposure(config)] == ["client"]


def test_a_secured_hub_is_open_nowhere() -> None:
    config = _config(
        "0.0.0.0:4080",
        _secured(),
        external_listen="0.0.0.0:7001",
        external_advertise="lb:7001",
    )
    assert open_listeners(config) == []
    assert check_exposure(config) == []


def test_tls_without_authentication_is_still_open() -> None:
    sec = SecuritySettings(tls_cert="c.pem", tls_key="k.pem")
    (client,) = exposed_listeners(_config("10.0.0.5:4080", sec))
    assert client.lacks.startswith("no authentication")


def test_the_external_listener_is_checked_too() -> None:
    config = _config("127.0.0.1:4080", external_listen="0.0.0.0:7001", external_advertise="lb:7001")
    assert [(o.name, o.address) for o in exposed_listeners(config)] == [
        ("external", "0.0.0.0:7001")
    ]


def test_an_internal_listener_without_its_tls_is_open() -> None:
    config = _config("127.0.0.1:4080", SecuritySettings(internal_listen="10.0.0.5:4081"))
    names = [o.name for o in exposed_listeners(config)]
    assert names == ["internal"]
    # The storage role moved to the internal listener: the client one no longer serves it.
    (client,) = [o for o in open_listeners(config) if o.name == "client"]
    assert "ledgers" not in client.lacks

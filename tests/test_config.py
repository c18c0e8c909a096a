"""Hub settings from flags and HEDWIG_* variables."""

from __future__ import annotations

import pytest

from hedwig.errors import UsageError
from hedwig.hub.config import HubConfig, parse_replication
from hedwig.metadata.records import ReplicationConfig
from hedwig.placement import PlacementPolicy


def test_environment_then_flags() -> None:
    env = {
        "HEDWIG_ZK": "zk:2181",
        "HEDWIG_REGION": "eu",
        "HEDWIG_LISTEN": "0.0.0.0:4080",
        "HEDWIG_METRICS_PORT": "9100",
        "HEDWIG_ZK_SESSION_TIMEOUT_S": "2.5",
        "HEDWIG_PLACEMENT": "least-loaded",
        "HEDWIG_SELF_BALANCE": "false",
        "HEDWIG_REPLICATION": "2/2/1",
        "HEDWIG_DEFAULT_RETENTION_MS": "",
    }
    c = HubConfig.from_env(env, region="us", metrics_port=None)
    assert c.zk == "zk:2181" and c.region == "us"  # the flag wins
    assert c.metrics_port == 9100  # None means "not given"
    assert c.zk_session_timeout_s == 2.5
    assert c.placement is PlacementPolicy.LEAST_LOADED
    assert c.self_balance is False
    assert c.replication_config == ReplicationConfig(2, 2, 1)
    assert c.default_retention_ms is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"HEDWIG_METRICS_PORT": "ninety"}, "HEDWIG_METRICS_PORT"),
        ({"HEDWIG_SELF_BALANCE": "maybe"}, "HEDWIG_SELF_BALANCE"),
        ({"HEDWIG_REPLICATION": "2/3/1"}, "ensemble >= write quorum"),
        ({"HEDWIG_LISTEN": "nowhere"}, "HOST:PORT"),
        ({"HEDWIG_PLACEMENT": "psychic"}, "HEDWIG_PLACEMENT"),
    ],
)
def test_bad_settings_are_refused_clearly(env: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        HubConfig.from_env(env)


def test_parse_replication() -> None:
    assert parse_replication("3/3/2") == ReplicationConfig(3, 3, 2)
    with pytest.raises(UsageError):
        parse_replication("3/3")

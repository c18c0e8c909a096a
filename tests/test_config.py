"""Hub settings from flags and HEDWIG_* variables."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from hedwig.errors import UsageError
from hedwig.metadata.records import ReplicationConfig
from hedwig.placement import PlacementPolicy
from hedwig.settings import (
    HubConfig,
    add_flags,
    command_line,
    environment,
    given_flags,
    parse_replication,
)
from hedwig.settings.declaration import declarations


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
    assert c.connection.metadata_url == "zk:2181" and c.connection.region == "us"  # flag wins
    assert c.http.metrics_port == 9100  # None means "not given"
    assert c.connection.metadata_session_timeout_s == 2.5
    assert c.placement.policy is PlacementPolicy.LEAST_LOADED
    assert c.balance.self_balance is False
    assert c.storage.replication_config == ReplicationConfig(2, 2, 1)
    assert c.retention.default_retention_ms is None


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


def test_the_metadata_url_by_its_name_and_by_its_aliases() -> None:
    named = {"HEDWIG_METADATA": "etcd://e:2379", "HEDWIG_METADATA_SESSION_TIMEOUT_S": "4"}
    c = HubConfig.from_env(named)
    assert c.connection.metadata_url == "etcd://e:2379"
    assert c.connection.metadata_session_timeout_s == 4.0
    # The new name wins over the old one when both are set.
    both = HubConfig.from_env({"HEDWIG_METADATA": "etcd://e:2379", "HEDWIG_ZK": "zk:2181"})
    assert both.connection.metadata_url == "etcd://e:2379"


def _hub_flags(*argv: str) -> HubConfig:
    parser = argparse.ArgumentParser()
    add_flags(parser, HubConfig)
    return HubConfig.from_env({}, **given_flags(parser.parse_args(argv), HubConfig))


def test_flags_and_their_aliases() -> None:
    c = _hub_flags("--zk", "zk:2181", "--zk-session-timeout", "3", "--no-self-balance")
    assert c.connection.metadata_url == "zk:2181"
    assert c.connection.metadata_session_timeout_s == 3.0
    assert c.balance.self_balance is False
    c = _hub_flags("--metadata", "etcd://e:2379", "--placement", "least-loaded")
    assert c.connection.metadata_url == "etcd://e:2379"
    assert c.placement.policy is PlacementPolicy.LEAST_LOADED


def test_what_is_written_reads_back() -> None:
    values: dict[str, object] = {
        "metadata_url": "zk-0:2181,zk-1:2181",
        "metadata_session_timeout_s": 8.0,
        "policy": PlacementPolicy.LOAD_WEIGHTED,
        "self_balance": False,
        "metrics_port": 9100,
        "load_report_max_age_s": 2.5,
    }
    env = environment(HubConfig, **values)
    assert env["HEDWIG_METADATA"] == "zk-0:2181,zk-1:2181"
    assert env["HEDWIG_METADATA_SESSION_TIMEOUT_S"] == "8"
    assert HubConfig.from_env(env) == HubConfig.from_env({}, **values)
    assert _hub_flags(*command_line(HubConfig, **values)) == HubConfig.from_env({}, **values)
    # None is written as the empty text, which reads back as None.
    unlimited = environment(HubConfig, default_retention_ms=None)
    assert unlimited == {"HEDWIG_DEFAULT_RETENTION_MS": ""}
    assert HubConfig.from_env(unlimited).retention.default_retention_ms is None


def test_unknown_settings_are_refused() -> None:
    with pytest.raises(UsageError, match="zk_session_timeout_s"):
        environment(HubConfig, zk_session_timeout_s=2.0)
    with pytest.raises(UsageError, match="zk"):
        HubConfig.from_env({}, zk="zk:2181")


def test_every_setting_has_a_kind_and_a_unique_name() -> None:
    found = declarations(HubConfig)
    assert len({d.name for d in found}) == len(found)
    assert len({d.env for d in found}) == len(found)
    assert {d.group for d in found} == {f.name for f in dataclasses.fields(HubConfig)}

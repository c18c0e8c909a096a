"""A HubPool without ``spec.security`` is secured; one with it turned off runs ``--insecure``
and says so in its status."""

from __future__ import annotations

from typing import Any

import pytest
from hedwig_operator.builders import build_configmap, build_pool_children, build_statefulset
from hedwig_operator.conditions import find
from hedwig_operator.specs import PoolSpec, parse_pool
from hedwig_operator.workers import PoolWorker

from hedwig.errors import UsageError
from hedwig.settings import HubConfig
from hedwig.settings.exposure import check_exposure, exposed_listeners

from .fakes import World, pool_body
from .test_rebalancing import settled_statefulset

OPERATOR = "system:serviceaccount:hedwig:hedwig-operator"


def hub_config(pool: PoolSpec) -> HubConfig:
    """What a hub of ``pool`` reads at start: the ConfigMap and its container's own variables."""
    data = build_configmap(pool, OPERATOR)["data"]
    container = build_statefulset(pool)["spec"]["template"]["spec"]["containers"][0]
    own = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    return HubConfig.from_env({**data, **own})


def test_a_pool_without_spec_security_is_built_as_a_secured_one() -> None:
    bare = parse_pool(pool_body(security=None))
    secured = parse_pool(pool_body(security={"enabled": True}))
    assert bare.security.enabled
    assert build_pool_children(bare, OPERATOR) == build_pool_children(secured, OPERATOR)
    env = build_configmap(bare, OPERATOR)["data"]
    assert env["HEDWIG_TLS_CERT"] == "/etc/hedwig/tls/tls.crt"
    assert env["HEDWIG_AUTHENTICATE"] == env["HEDWIG_AUTHORIZE"] == "true"
    assert env["HEDWIG_INTERNAL_LISTEN"] == "0.0.0.0:4081"
    assert "HEDWIG_INSECURE" not in env
    pod = build_statefulset(bare)["spec"]["template"]["spec"]
    tls = next(v for v in pod["volumes"] if v["name"] == "hub-tls")
    assert tls["secret"]["secretName"] == "pool-hub-tls"
    # Its hubs listen on the pod's address, and are open nowhere: they start without --insecure.
    config = hub_config(bare)
    assert config.connection.listen == "0.0.0.0:4080"
    assert exposed_listeners(config) == []
    assert not config.security.insecure


def test_an_open_pool_tells_its_hubs_they_run_insecure() -> None:
    pool = parse_pool(pool_body())  # spec.security.enabled: false
    env = build_configmap(pool, OPERATOR)["data"]
    assert env["HEDWIG_INSECURE"] == "true"
    assert "HEDWIG_AUTHENTICATE" not in env
    config = hub_config(pool)
    assert [o.name for o in check_exposure(config)] == ["client"]
    # Without it, the same hub would refuse to start.
    env.pop("HEDWIG_INSECURE")
    with pytest.raises(UsageError, match="refusing to start open to the network"):
        check_exposure(HubConfig.from_env(env))


async def _refreshed_status(body: dict[str, Any]) -> dict[str, Any]:
    w = await World().start()
    w.kube.put(body)
    w.kube.put(settled_statefulset())
    worker = PoolWorker(w.ctx, body, lambda key: [])
    await worker.refresh(parse_pool(body))
    if parse_pool(body).security.enabled:
        # The pool's hub certificate is made and mounted (a secured pool's first Secret).
        assert ("Secret", "ns", "pool-hub-tls") in w.kube.objects
    status: dict[str, Any] = w.kube.objects[("HubPool", "ns", "pool")]["status"]
    return status


async def test_the_status_says_whether_a_pool_is_secured() -> None:
    status = await _refreshed_status(pool_body(security=None))
    secured = find(status["conditions"], "Secured")
    assert secured is not None
    assert (secured["status"], secured["reason"]) == ("True", "SecurityEnabled")

    status = await _refreshed_status(pool_body())
    open_ = find(status["conditions"], "Secured")
    assert open_ is not None
    assert (open_["status"], open_["reason"]) == ("False", "Insecure")
    assert "--insecure" in open_["message"]
    assert "delete topics and ledgers" in open_["message"]

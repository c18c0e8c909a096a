"""The chart's ZooKeeper admin digest: one Secret, ZooKeeper's super-user, the operator's.

``/hedwig`` is closed to creation by all but the admin digest (docs/security.md), so the
chart's ZooKeeper must know the admin as its super-user (the hash computed at start by
ZooKeeper's own DigestAuthenticationProvider), and the operator must hold the digest to make
secured pools' regions. With an external ensemble there is no such Secret.
"""

from __future__ import annotations

import base64

from tests.chart.tools import find, one, render


def test_zookeeper_and_the_operator_share_the_admin_digest() -> None:
    objects = render()
    secret = one(objects, "Secret", "hedwig-zookeeper-admin")
    user, sep, password = base64.b64decode(secret["data"]["digest"]).decode().partition(":")
    assert user == "hedwig-admin" and sep and len(password) == 32
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"

    zk = one(objects, "StatefulSet", "hedwig-zookeeper")["spec"]["template"]["spec"]
    (server,) = zk["containers"]
    volumes = {v["name"]: v for v in zk["volumes"]}
    mounts = {m["name"]: m for m in server["volumeMounts"]}
    assert volumes["admin"]["secret"]["secretName"] == "hedwig-zookeeper-admin"
    assert mounts["admin"]["mountPath"] == "/zookeeper/admin" and mounts["admin"]["readOnly"]
    command = server["args"][0]
    assert 'DigestAuthenticationProvider "$(cat /zookeeper/admin/digest)"' in command
    assert "-Dzookeeper.DigestAuthenticationProvider.superDigest=$SUPER" in command
    assert 'test -n "$SUPER"' in command  # no super-user, no start

    operator = one(objects, "Deployment")["spec"]["template"]["spec"]
    (c,) = operator["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    path = env["HEDWIG_ZK_ADMIN_DIGEST_FILE"]
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "zookeeper-admin"]
    assert path == f"{mount['mountPath']}/digest" and mount["readOnly"]
    (volume,) = [v for v in operator["volumes"] if v["name"] == "zookeeper-admin"]
    assert volume["secret"]["secretName"] == "hedwig-zookeeper-admin"


def test_an_external_zookeeper_has_no_admin_secret() -> None:
    objects = render(sets=["zookeeper.enabled=false", "zookeeper.external.connect=zk:2181"])
    assert not find(objects, "Secret")
    (c,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert "HEDWIG_ZK_ADMIN_DIGEST_FILE" not in {e["name"] for e in c["env"]}

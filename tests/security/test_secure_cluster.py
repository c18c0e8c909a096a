"""A secured cluster of real processes: ``hedwig dev up --secure``'s hubs (uvloop, TLS, ACLs,
an internal listener each, protected znodes) with the ``hedwig`` commands against them."""

from __future__ import annotations

import json
import os
import socket
import ssl
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from hedwig.devcluster.cluster import DevCluster
from hedwig.metadata.layout import Layout
from hedwig.security.tls import client_context
from tests.cluster_helpers import hedwig

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster() -> Iterator[DevCluster]:
    with DevCluster(hubs=2, region="secure", secure=True, session_timeout_s=4.0) as c:
        yield c


def as_user(cluster: DevCluster, user: str) -> dict[str, str]:
    assert cluster.security is not None
    return cluster.security.client_env(user)


def run(env: dict[str, str], *args: str, input: str | None = None) -> tuple[int, str, str]:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        done = hedwig(*args, input=input, timeout=60)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return done.returncode, done.stdout, done.stderr


def test_the_super_user_publishes_and_reads_back(cluster: DevCluster) -> None:
    hubs = ",".join(cluster.addresses)
    admin = as_user(cluster, "admin")
    code, out, err = run(admin, "pub", "--hub", hubs, "greetings", input="hello\nworld\n")
    assert code == 0, err
    assert out.splitlines() == ["1\thello", "2\tworld"]


def test_a_user_without_acls_is_refused_until_granted(cluster: DevCluster) -> None:
    hubs = ",".join(cluster.addresses)
    admin, alice = as_user(cluster, "admin"), as_user(cluster, "alice")
    run(admin, "pub", "--hub", hubs, "orders.eu", input="first\n")
    code, _, err = run(alice, "pub", "--hub", hubs, "orders.eu", input="x\n")
    assert code != 0 and "alice may not publish topic 'orders.eu'" in err
    code, _, err = run(
        admin,
        "acl",
        "add",
        "dev/alice",
        "--zk",
        cluster.zk,
        "--region",
        "secure",
        "--principal",
        "alice",
        "--topic-prefix",
        "orders.",
        "--operations",
        "publish",
    )
    assert code == 0, err
    code, out, err = run(alice, "pub", "--hub", hubs, "orders.eu", input="granted\n")
    assert code == 0, err
    assert out.strip() == "2\tgranted"


def test_anonymous_and_plaintext_clients_are_refused_clearly(cluster: DevCluster) -> None:
    code, _, err = run({}, "pub", "--hub", cluster.addresses[0], "greetings", input="x\n")
    assert code != 0 and "TLS connections only" in err
    assert cluster.security is not None
    tls_only = {"HEDWIG_TLS_CA": cluster.security.path("hub-ca.crt")}
    code, _, err = run(tls_only, "pub", "--hub", cluster.addresses[0], "greetings", input="x\n")
    assert code != 0 and "needs an identity" in err


def test_znodes_cannot_be_changed_by_another_zookeeper_client(cluster: DevCluster) -> None:
    hubs = ",".join(cluster.addresses)
    run(as_user(cluster, "admin"), "pub", "--hub", hubs, "owned", input="x\n")
    layout = Layout("secure")
    zk = KazooClient(hosts=cluster.zk)
    zk.start(timeout=10)
    try:
        owner = layout.owner("owned")
        assert zk.exists(owner) is not None  # readable by anyone
        with pytest.raises(NoAuthError):
            zk.delete(owner)
        with pytest.raises(NoAuthError):
            zk.set(layout.persistence("owned"), b'{"ranges": []}')
        with pytest.raises(NoAuthError):
            zk.create(layout.acl("mallory"), b'{"rules": []}')
    finally:
        zk.stop()
        zk.close()


def test_hedwig_ledgers_reads_replicas_with_a_hub_certificate(cluster: DevCluster) -> None:
    hubs = ",".join(cluster.addresses)
    admin = as_user(cluster, "admin")
    run(admin, "pub", "--hub", hubs, "ledgered", input="a\nb\n")
    code, _, err = run(admin, "move", "ledgered", "--hub", hubs)  # closes its ledger
    assert code == 0, err
    assert cluster.security is not None
    hub = {
        "HEDWIG_INTERNAL_CA": cluster.security.path("hub-ca.crt"),
        "HEDWIG_INTERNAL_CERT": cluster.security.path("hub.crt"),
        "HEDWIG_INTERNAL_KEY": cluster.security.path("hub.key"),
    }
    args = ("ledgers", "--zk", cluster.zk, "--region", "secure", "--replication", "2/2/2")
    before = read_lacs_answered(cluster)
    code, out, err = run(hub, *args, "--json")
    assert code == 0, err
    closed = [r for r in json.loads(out) if r["topic"] == "ledgered" and r["state"] == "CLOSED"]
    # Both replicas answered over their internal listeners: none dead or lagging.
    assert closed and all(not r["under_replicated"] and not r["lagging"] for r in closed)
    assert read_lacs_answered(cluster) >= before + 2 * len(closed)
    # Without a hub certificate nothing reaches the storage role.
    before = read_lacs_answered(cluster)
    code, out, err = run({}, *args, "--json")
    assert code == 0, err
    assert read_lacs_answered(cluster) == before


def read_lacs_answered(cluster: DevCluster) -> float:
    """READ_LAC requests the hubs answered OK, from their metrics."""
    import urllib.request

    total = 0.0
    for hub in cluster.hub_procs:
        with urllib.request.urlopen(hub.metrics_url + "/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith('hedwig_requests_total{op="read_lac",status="ok"}'):
                    total += float(line.split()[-1])
    return total


def test_lifecycle_commands_authenticate_and_need_their_operations(cluster: DevCluster) -> None:
    """``hedwig topic``/``subscription`` with the security flags: a user without the
    operation is refused with the principal, operation and topic named, and changes nothing;
    the super-user describes, resets and deletes."""
    hubs = ",".join(cluster.addresses)
    admin = as_user(cluster, "admin")
    code, _, err = run(admin, "pub", "--hub", hubs, "lifecycle.t", input="a\nb\n")
    assert code == 0, err
    code, _, err = run(admin, "subscription", "create", "--hub", hubs, "lifecycle.t", "reader")
    assert code == 0, err
    alice_env = as_user(cluster, "alice")
    flags = [
        "--tls-ca",
        alice_env["HEDWIG_TLS_CA"],
        "--cert",
        alice_env["HEDWIG_CERT"],
        "--cert-key",
        alice_env["HEDWIG_KEY"],
    ]
    for args, refusal in (
        (["topic", "describe"], "alice may not describe topic 'lifecycle.t'"),
        (["topic", "delete", "--force"], "alice may not admin topic 'lifecycle.t'"),
        (["subscription", "reset", "--earliest"], "alice may not subscribe topic 'lifecycle.t'"),
    ):
        target = ["lifecycle.t", "reader"] if args[0] == "subscription" else ["lifecycle.t"]
        code, _, err = run({}, *args, "--hub", hubs, *flags, *target)
        assert code != 0 and refusal in err, (args, err)
    code, out, err = run(admin, "topic", "describe", "--hub", hubs, "--json", "lifecycle.t")
    assert code == 0, err
    described = json.loads(out)
    assert (described["last_seq"], described["subscriptions"]) == (2, 1)  # nothing changed
    code, _, err = run(
        admin, "subscription", "reset", "--hub", hubs, "--earliest", "lifecycle.t", "reader"
    )
    assert code == 0, err
    code, _, err = run(admin, "topic", "delete", "--hub", hubs, "--force", "lifecycle.t")
    assert code == 0, err
    code, _, err = run(admin, "topic", "describe", "--hub", hubs, "lifecycle.t")
    assert code != 0


def test_the_env_files_store_certificate_is_no_hub(cluster: DevCluster) -> None:
    """The ``env`` file gives every command line user etcd's client certificate: it comes from
    the store's own CA, so the hubs' internal listener, which admits any certificate of the hub
    CA as a hub, refuses it, and a storage read with it reaches no replica."""
    assert cluster.security is not None
    sec = cluster.security
    env = {
        k: v
        for line in (sec.directory / "env").read_text().splitlines()
        for k, _, v in [line.removeprefix("export ").partition("=")]
    }
    as_store = client_context(
        sec.path("hub-ca.crt"), cert=env["HEDWIG_ETCD_CERT"], key=env["HEDWIG_ETCD_KEY"]
    )
    as_hub = client_context(
        sec.path("hub-ca.crt"), cert=sec.path("hub.crt"), key=sec.path("hub.key")
    )
    for hub in cluster.hub_procs:
        assert _internal_handshake(as_hub, hub.internal_port) is None
        assert _internal_handshake(as_store, hub.internal_port) is not None

    hubs = ",".join(cluster.addresses)
    run(as_user(cluster, "admin"), "pub", "--hub", hubs, "stored", input="secret\n")
    run(as_user(cluster, "admin"), "move", "stored", "--hub", hubs)
    store_as_hub = {
        "HEDWIG_INTERNAL_CA": sec.path("hub-ca.crt"),
        "HEDWIG_INTERNAL_CERT": env["HEDWIG_ETCD_CERT"],
        "HEDWIG_INTERNAL_KEY": env["HEDWIG_ETCD_KEY"],
    }
    before = read_lacs_answered(cluster)
    args = ("ledgers", "--zk", cluster.zk, "--region", "secure", "--replication", "2/2/2")
    code, _, err = run(store_as_hub, *args, "--json")
    assert code == 0, err
    assert read_lacs_answered(cluster) == before


def _internal_handshake(ctx: ssl.SSLContext, port: int) -> str | None:
    """None if a hub's internal listener keeps a TLS connection made with ``ctx`` open (it
    waits for a frame), else how it refused. (With TLS 1.3 the server's verdict on a client
    certificate comes after the client's side of the handshake: an alert, or the connection
    closed, on the first read.)"""
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            tls.settimeout(1.0)
            try:
                got = tls.recv(1)
            except TimeoutError:
                return None
            return f"closed by the hub ({got!r})"
    except (ssl.SSLError, OSError) as exc:
        return str(exc) or type(exc).__name__

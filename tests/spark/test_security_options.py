"""The data source's security options reach the client it connects with, and a batch write and
read go through secured hubs with them (and are refused without an allowed identity)."""

from __future__ import annotations

import ssl
import uuid
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from hedwig.devcluster.cluster import DevCluster
from hedwig.security.ca import CertificateAuthority
from hedwig_spark.options import parse_cluster

pytestmark = pytest.mark.timeout(300)


def test_security_options_make_the_clients_tls_and_token(tmp_path: object) -> None:
    from pathlib import Path

    d = Path(str(tmp_path))
    CertificateAuthority.create("test").write(d, "ca")
    (d / "token").write_text("a.b.c\n")
    cluster = parse_cluster(
        {"hubs": "h:1", "tlscafile": str(d / "ca.crt"), "tokenfile": str(d / "token")}
    )
    security = cluster.security.client_security()
    assert isinstance(security.tls, ssl.SSLContext)
    assert security.credentials is not None and security.credentials.token() == "a.b.c"
    plain = parse_cluster({"hubs": "h:1"}).security
    assert not plain.tls and plain.tls_ca is None
    with pytest.raises(ValueError, match="'tls'"):
        parse_cluster({"hubs": "h:1", "tls": "maybe"})


@pytest.fixture(scope="module")
def secured() -> Iterator[DevCluster]:
    with DevCluster(hubs=2, region=f"spark-secure-{uuid.uuid4().hex[:6]}", secure=True) as c:
        yield c


def user_options(cluster: DevCluster, user: str) -> dict[str, str]:
    assert cluster.security is not None
    env = cluster.security.client_env(user)
    return {
        "hubs": ",".join(cluster.addresses),
        "tlsCaFile": env["HEDWIG_TLS_CA"],
        "tlsCertFile": env["HEDWIG_CERT"],
        "tlsKeyFile": env["HEDWIG_KEY"],
    }


def test_batch_write_and_read_through_secured_hubs(
    spark: SparkSession, secured: DevCluster, topic: str
) -> None:
    admin = user_options(secured, "admin")
    df = spark.createDataFrame([(f"v{i}",) for i in range(50)], "value string")
    df.write.format("hedwig").options(**admin).option("topic", topic).mode("append").save()
    got = spark.read.format("hedwig").options(**admin).option("topic", topic).load().collect()
    assert sorted(bytes(r.value).decode() for r in got) == sorted(f"v{i}" for i in range(50))

    # alice has no ACLs; without any identity the hubs take nothing either.
    alice = user_options(secured, "alice")
    with pytest.raises(Exception, match="alice may not publish topic"):
        df.write.format("hedwig").options(**alice).option("topic", topic).mode("append").save()
    anonymous = {"hubs": admin["hubs"], "tlsCaFile": admin["tlsCaFile"]}
    with pytest.raises(Exception, match="needs an identity"):
        spark.read.format("hedwig").options(**anonymous).option("topic", topic).load().collect()
    again = spark.read.format("hedwig").options(**admin).option("topic", topic).load().count()
    assert again == 50

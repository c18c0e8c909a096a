"""What a crashed hub's lease expiry costs etcd: how long everyone else's requests wait.

    PYTHONPATH=. .venv/bin/python -m bench.lease_expiry --keys 300000 --leases 1 32

For each ``--leases`` count, on a fresh etcd (built as the e2e control plane builds it): a
"hub" puts ``--keys`` owner-record-sized keys on that many leases (its session's TTL,
``--ttl``), then stops refreshing them without revoking (as ``kill -9`` leaves them), while
another client writes one small key at a time, without pause, until every one of the keys is
gone. Reported per count: the probe's write latency while the leases expire (median, p99, the
longest: etcd applies a lease's expiry, every key of it, as one raft entry and applies nothing
else meanwhile), and the time from the crash until the last key is gone.

A hub put every owner record on its session's one lease; it now spreads them over
``hedwig.metadata.etcd.lease_keeper.OWNER_LEASES`` (32). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time
from typing import Any

from hedwig.devcluster.etcd import EtcdServer
from hedwig.metadata.etcd import lease_keeper
from hedwig.metadata.etcd.client import EtcdClient
from hedwig.metadata.etcd.wire import put

# About an owner record's size (the hub's address and epoch as JSON).
VALUE = b'{"address": "10.0.0.1:4080", "epoch": 1764230000000}'
PREFIX = b"/bench/owners/"


async def one(keys: int, leases: int, ttl: float) -> dict[str, Any]:
    data = tempfile.mkdtemp(prefix="hedwig-lease-bench-")
    server = EtcdServer(data_dir=data)
    server.start()
    hub = EtcdClient(server.address, ttl_s=ttl)
    probe = EtcdClient(server.address, ttl_s=60)
    try:
        await hub.start()
        await probe.start()
        # As a hub's owner records: on the session's owner leases, kept alive with it.
        lease_keeper.OWNER_LEASES = leases
        sem = asyncio.Semaphore(512)

        async def put_one(i: int) -> None:
            async with sem:
                key = PREFIX + b"%08d" % i
                await hub.txn((), (put(key, VALUE, await hub.owner_lease(key)),))

        t0 = time.monotonic()
        await asyncio.gather(*(put_one(i) for i in range(keys)))
        put_s = time.monotonic() - t0
        assert len(hub.leases) == leases + 1
        # The crash: no more refreshes (the session's own lease included), nothing revoked.
        await hub.drop()
        crashed = time.monotonic()
        latencies: list[float] = []
        expiring: list[float] = []  # those from shortly before the TTL ran out
        gone_at = None
        n = 0
        while gone_at is None:
            t = time.monotonic()
            await probe.txn((), (put(b"/bench/probe/%d" % (n % 100), b"x"),))
            latencies.append(time.monotonic() - t)
            if t - crashed > 0.8 * ttl:
                expiring.append(latencies[-1])
            n += 1
            if n % 200 == 0 and time.monotonic() - crashed > ttl:
                left, _ = await probe.range(PREFIX, keys_only=True)
                if not left:
                    gone_at = time.monotonic()
            if time.monotonic() - crashed > ttl + 600:
                raise RuntimeError("the keys did not go within 10 minutes of the TTL")
        during = sorted(expiring or latencies)
        return {
            "keys": keys,
            "leases": leases,
            "put_s": round(put_s, 1),
            "gone_after_crash_s": round(gone_at - crashed, 1),
            "probe_writes": len(latencies),
            "probe_p50_ms": round(during[len(during) // 2] * 1000, 1),
            "probe_p99_ms": round(during[int(len(during) * 0.99)] * 1000, 1),
            "probe_max_ms": round(max(latencies) * 1000, 1),
            # How often, and how long in all, a write waited over 100 ms: etcd held up.
            "probe_over_100ms": sum(1 for x in latencies if x > 0.1),
            "probe_over_100ms_total_s": round(sum(x for x in latencies if x > 0.1), 2),
        }
    finally:
        await probe.close()
        await hub.drop()
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "ttl_s": args.ttl,
        "runs": [await one(args.keys, n, args.ttl) for n in args.leases],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--leases", type=int, nargs="+", default=[1, 32])
    p.add_argument("--ttl", type=float, default=20.0)
    print(json.dumps(asyncio.run(run(p.parse_args()))))


if __name__ == "__main__":
    main()

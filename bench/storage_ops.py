"""What a hub's storage role costs per ledger: the work a claim wave, a failover and a restart
give one replica, on this machine's disk.

    PYTHONPATH=. .venv/bin/python -m bench.storage_ops --ledgers 100000

One ``LocalStorage`` in a fresh directory under ``--dir`` (default: the system's temporary
directory; give a directory on the disk hubs use), driven the way the hub's storage frames
drive it, ``--concurrency`` requests in flight:

- **claims**: the first entry of ``--ledgers`` new ledgers (a claim writes its topic's first
  ledger entry to every replica: 3 per claim in a 3/3/2 region);
- **fences**: each of them fenced (a take-over fences the previous ledger on each replica);
- **appends**: ``--appends`` more entries spread over all the ledgers (many topics active at
  a low rate, an entry each now and then);
- **restart**: the storage closed and opened again (a hub's start scans what it stores);
- **deletes**: every ledger deleted (retention, topic deletion).

For each: wall seconds, CPU seconds of this process (the storage's flushing thread included:
it is where files were created and synced), operations per second, CPU microseconds per
operation, and the syncs. Also the files in the directory after the claims, and this
process's resident memory growth per stored ledger. The same script measures a tree from
before the entry log (``PYTHONPATH=OLD/src:.``): it only uses the storage role's interface.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.scale import rss_bytes
from hedwig.ledger.storage import LocalStorage


async def _phase(
    name: str,
    count: int,
    concurrency: int,
    op: Callable[[int], Awaitable[Any]],
    storage: LocalStorage,
) -> dict[str, Any]:
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            await op(i)

    syncs = storage.syncs
    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one(i) for i in range(count)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "phase": name,
        "ops": count,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "ops_per_s": round(count / wall),
        "cpu_us_per_op": round(cpu / count * 1e6, 1),
        "syncs": storage.syncs - syncs,
    }


async def run(ledgers: int, appends: int, concurrency: int, base: str | None) -> dict[str, Any]:
    directory = tempfile.mkdtemp(prefix="hedwig-storage-bench-", dir=base)
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)
    out: dict[str, Any] = {"ledgers": ledgers, "appends": appends, "concurrency": concurrency}
    phases = []
    try:
        storage = LocalStorage(directory, "bench")
        payload = b"m" * 120  # about one small message's batch
        rss = rss_bytes()
        phases.append(
            await _phase(
                "claims",
                ledgers,
                concurrency,
                lambda i: storage.add_entry(i, 0, -1, payload),
                storage,
            )
        )
        out["files_after_claims"] = len(os.listdir(os.path.join(directory, "ledgers")))
        out["rss_bytes_per_ledger"] = round((rss_bytes() - rss) / ledgers)
        phases.append(
            await _phase(
                "fences",
                ledgers,
                concurrency,
                lambda i: storage.read_lac(i, fence=True),
                storage,
            )
        )
        phases.append(
            await _phase(
                "appends",
                appends,
                concurrency,
                lambda i: storage.add_entry(
                    i % ledgers, 1 + i // ledgers, i // ledgers, payload, recovery=True
                ),
                storage,
            )
        )
        await storage.close()
        wall, cpu = time.perf_counter(), time.process_time()
        storage = LocalStorage(directory, "bench")
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        phases.append(
            {
                "phase": "restart",
                "ops": ledgers,
                "wall_s": round(wall, 2),
                "cpu_s": round(cpu, 2),
                "ops_per_s": round(ledgers / wall),
                "cpu_us_per_op": round(cpu / ledgers * 1e6, 1),
                "syncs": 0,
            }
        )
        assert len(storage.ledgers()) == ledgers
        phases.append(
            await _phase(
                "deletes", ledgers, concurrency, lambda i: storage.delete_ledger(i), storage
            )
        )
        await storage.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    out["open_files_limit"] = limit[0]
    out["phases"] = phases
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ledgers", type=int, default=100_000)
    ap.add_argument("--appends", type=int, default=100_000)
    ap.add_argument("--concurrency", type=int, default=200)
    ap.add_argument("--dir", default=None, help="where to make the storage's directory")
    args = ap.parse_args()
    print(json.dumps(asyncio.run(run(args.ledgers, args.appends, args.concurrency, args.dir))))


if __name__ == "__main__":
    main()

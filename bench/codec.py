"""The codec's per-message costs in nanoseconds, on one batch of 2,000 messages of 100 B.

    .venv/bin/python -m bench.codec
    PYTHONPATH=/tmp/compiled/src .venv/bin/python -m bench.codec   # another build of hedwig

Each line is one step of a message's way that runs per message in Python: the client's inline
encoding and batch assembly, the hub's check of an untrusted batch (``largest_message``), a
subscriber window cutting a stored batch (``Batch.slice``), the client's check and decoding of
a delivered batch. Run it against a compiled build of ``hedwig.protocol`` to see what compiling
buys, or against an older checkout (``PYTHONPATH=../before/src``, from the split of
``hedwig.protocol.messages`` into a package on) to see what a change bought.

The messages are all of one size, as in the benchmarks; the ``(mixed sizes)`` line checks a
batch whose sizes differ, which takes the message-by-message path.
"""

from __future__ import annotations

import json
import timeit
from collections.abc import Callable

from hedwig.protocol import messages as m
from hedwig.protocol.messages import scanning
from hedwig.protocol.wire import U32

COUNT = 2000
SIZE = 100


def steps() -> dict[str, Callable[[], object]]:
    values = [bytes([i % 251]) * SIZE for i in range(COUNT)]
    no_key, no_headers = m.NO_KEY_BYTES, m.NO_HEADERS

    def encode_inline() -> object:
        # What ``HedwigClient.publish_nowait`` does per message, then the batch's join.
        parts = [b"".join((no_key, U32.pack(len(v)), v, no_headers)) for v in values]
        return m.EncodedMessages.of(parts)  # type: ignore[arg-type]

    encoded = m.EncodedMessages.of_values(values)
    mixed = m.EncodedMessages.of_values([v[: SIZE - i % 7] for i, v in enumerate(values)])
    batch = m.Batch(
        first_seq=1, publish_time_ms=0, publisher_id="p", publisher_seq=1, messages=encoded
    ).with_raw()
    raw = batch.encode()
    received = m.Batch.decode(raw)  # as a subscriber has it
    return {
        "client: encode and join (publish_nowait + cut)": encode_inline,
        "client: encode many at once (encode_values, publish_batch)": lambda: m.encode_values(
            values
        ),
        "hub: check an untrusted batch (largest_message)": lambda: scanning.largest_message(
            encoded.payload, COUNT
        ),
        "hub: check an untrusted batch (largest_message, mixed sizes)": lambda: (
            scanning.largest_message(mixed.payload, COUNT)
        ),
        "hub: cut a batch just read in two (Batch.slice)": lambda: m.Batch.from_stored(raw).slice(
            1, COUNT // 2
        ),
        "client: check a delivered batch (Batch.decode)": lambda: m.Batch.decode(raw),
        "client: decode to messages (Batch.delivered)": lambda: received.delivered(),
    }


def main() -> None:
    compiled = scanning.__file__ is not None and not scanning.__file__.endswith(".py")
    out: dict[str, object] = {"module": scanning.__file__, "compiled": compiled}
    for name, fn in steps().items():
        best = min(timeit.repeat(fn, number=20, repeat=7)) / 20
        out[name] = round(best / COUNT * 1e9, 1)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

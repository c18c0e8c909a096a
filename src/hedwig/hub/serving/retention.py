"""The retention boundary of a topic's subscriptions: the first sequence id any of them,
attached or not, still needs. For a subscription acknowledged message by message it is the
one after its cumulative mark: messages acknowledged above the mark, waiting to be delivered
again or held back by a delay are all above it, so none is collected while it may be needed.
"""

from __future__ import annotations

from collections.abc import Iterable

from hedwig.metadata.managers import MetadataStore


async def keep_from_seq_of(
    store: MetadataStore, topic: str, last_seq: int, attached: Iterable[int] = ()
) -> int:
    """The first sequence id some subscriber of ``topic`` still needs: the stored marks and
    ``attached`` (the marks of subscribers attached here, maybe not stored yet)."""
    subs = await store.subscriptions.read_subscriptions(topic)
    marks = [v.value.state.consumed_seq for v in subs.values() if v.value.state is not None]
    marks += attached
    return (min(marks) if marks else last_seq) + 1

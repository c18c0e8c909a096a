"""Topic resources: each manages one topic of a pool, reconciled into the pool's metadata
store and reported in its status, and its data deleted with it if asked.

Where things are: ``claims`` (which Topic manages which topic of a pool), ``reconcile`` (the
rules a Topic is reconciled by, in the order they are checked), ``snapshot`` (what the store
says about a topic), ``status`` (the Topic's status from it), ``deletion`` (a Topic's data
deleted with it, behind a finalizer), ``errors`` (the failure that is retried).
"""

from hedwig_operator.conditions import now_iso
from hedwig_operator.topics.claims import (
    TopicClaim,
    claim_of,
    claims_key,
    conflict_winner,
    pool_ref,
)
from hedwig_operator.topics.deletion import delete_topic_data, wants_finalizer
from hedwig_operator.topics.errors import TransientError
from hedwig_operator.topics.reconcile import reconcile_topic
from hedwig_operator.topics.snapshot import TopicSnapshot, read_snapshot
from hedwig_operator.topics.status import MODE_NAMES, build_topic_status

__all__ = [
    "MODE_NAMES",
    "TopicClaim",
    "TopicSnapshot",
    "TransientError",
    "build_topic_status",
    "claim_of",
    "claims_key",
    "conflict_winner",
    "delete_topic_data",
    "now_iso",
    "pool_ref",
    "read_snapshot",
    "reconcile_topic",
    "wants_finalizer",
]

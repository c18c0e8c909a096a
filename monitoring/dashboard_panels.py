"""The panels of Hedwig's Grafana dashboard, as data: each panel's title, description and
PromQL queries, grouped in rows (``ROWS``). ``dashboards`` builds Grafana's JSON model from
them, ``render`` draws them, and e2e/test_monitoring.py runs every query against a real
Prometheus scraping real hubs, failing on any that returns nothing: a panel of events that
may not have happened yet (errors, refusals) shows a flat 0 rather than no data
(``or_zero``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Label matchers every query carries: the dashboard's namespace and pool variables.
SEL = 'namespace=~"$namespace", pool=~"$pool"'
#: Variables a query may use, and what they stand for outside Grafana (the tests).
VARIABLES = ("$namespace", "$pool", "$__rate_interval")
#: Window of the sparse histograms and counters (moves, ownerless time, repairs): events are
#: rare, so a longer window than the rate interval keeps them visible.
EVENT_WINDOW = "5m"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"  # Grafana unit id: short, ops, Bps, s, percentunit, ...
    width: int = 12  # of 24 columns
    height: int = 8
    stack: bool = False
    decimals: int | None = None
    min: float | None = 0
    thresholds: tuple[tuple[float, str], ...] = field(default=())


def q(expr: str, legend: str) -> Query:
    return Query(" ".join(expr.split()), legend)


def event_increase(metric: str, by: str, window: str = EVENT_WINDOW) -> str:
    """Events counted by a labelled counter over ``window``. The hubs create every label value
    at 0 when they start, so ``increase()`` sees the first event too."""
    return f"sum by ({by}) (increase({metric}_total{{{SEL}}}[{window}]))"


def hub_load(sel: str = SEL) -> str:
    """Each hub's load as the rebalancing policy sees it: EWMA messages/s in plus out."""
    return f'sum by (namespace, pool, pod) (hedwig_hub_rate{{{sel}, unit="messages"}})'


# Answers that send a client elsewhere rather than refuse it: part of normal routing.
ROUTING = "ok|not_responsible_for_topic|topic_moving|use_lane"


def or_zero(expr: str, by: str = "pool") -> str:
    """``expr``, or 0 per ``by`` where it has no series (no refusal yet: the counters of
    answers are made at their first one), so the panel shows a flat line, not "no data"."""
    return f"({expr}) or (sum by ({by}) (hedwig_connections{{{SEL}}}) * 0)"


ROWS: tuple[tuple[str, tuple[Panel, ...]], ...] = (
    (
        "Traffic per hub",
        (
            Panel(
                "Messages in per hub",
                "Messages published and stored by each hub (the owners of their topics).",
                (
                    q(
                        f"sum by (pod) (rate(hedwig_messages_in_total{{{SEL}}}[$__rate_interval]))",
                        "{{pod}}",
                    ),
                ),
                unit="ops",
                width=6,
                stack=True,
            ),
            Panel(
                "Messages out per hub",
                "Messages delivered to subscribers by each hub.",
                (
                    q(
                        f"sum by (pod) (rate(hedwig_messages_out_total{{{SEL}}}"
                        "[$__rate_interval]))",
                        "{{pod}}",
                    ),
                ),
                unit="ops",
                width=6,
                stack=True,
            ),
            Panel(
                "Bytes in per hub",
                "Payload bytes published to each hub.",
                (
                    q(
                        f"sum by (pod) (rate(hedwig_bytes_in_total{{{SEL}}}[$__rate_interval]))",
                        "{{pod}}",
                    ),
                ),
                unit="Bps",
                width=6,
                stack=True,
            ),
            Panel(
                "Bytes out per hub",
                "Payload bytes delivered by each hub.",
                (
                    q(
                        f"sum by (pod) (rate(hedwig_bytes_out_total{{{SEL}}}[$__rate_interval]))",
                        "{{pod}}",
                    ),
                ),
                unit="Bps",
                width=6,
                stack=True,
            ),
        ),
    ),
    (
        "Placement and balance",
        (
            Panel(
                "Topics per hub",
                "Topics each hub owns.",
                (q(f"sum by (pod) (hedwig_topics_owned{{{SEL}}})", "{{pod}}"),),
                width=6,
                decimals=0,
            ),
            Panel(
                "Hub load (policy view)",
                "Each hub's EWMA messages/s in plus out, from its load report: the numbers "
                "the rebalancing policy (hubs or operator) balances.",
                (q(hub_load(), "{{pod}}"),),
                unit="ops",
                width=6,
            ),
            Panel(
                "Imbalance",
                "Busiest hub's load over the pool's mean load: 1 is perfectly balanced. "
                "The HedwigHubImbalance alert fires above its ratio (1.5 by default).",
                (
                    q(
                        f"max by (namespace, pool) ({hub_load()}) "
                        f"/ avg by (namespace, pool) ({hub_load()})",
                        "{{pool}}",
                    ),
                ),
                width=6,
                min=1,
                thresholds=((1.5, "orange"),),
            ),
            Panel(
                "Topic moves by reason",
                "Topics handed over gracefully (by reason: rebalancing, a move request, a hub "
                "shutting down) and topics lost without a hand-off (ZooKeeper session loss), "
                f"per {EVENT_WINDOW}.",
                (
                    q(event_increase("hedwig_topic_releases", "reason"), "handed over: {{reason}}"),
                    q(event_increase("hedwig_topic_losses", "reason"), "lost: {{reason}}"),
                ),
                width=6,
            ),
        ),
    ),
    (
        "Availability and latency",
        (
            Panel(
                "Time without owner",
                "How long topics waited for a new owner before a hub claimed them (from the "
                "previous owner's hand-off, or its last message after a crash), over "
                f"{EVENT_WINDOW}.",
                tuple(
                    q(
                        f"histogram_quantile({p}, sum by (le) (increase("
                        f"hedwig_topic_ownerless_seconds_bucket{{{SEL}}}[{EVENT_WINDOW}])))",
                        f"p{round(p * 100)}",
                    )
                    for p in (0.5, 0.99)
                ),
                unit="s",
                width=6,
            ),
            Panel(
                "Publish latency",
                "From a publish request's arrival to its durable acknowledgement (replicated "
                "to the ack quorum), all hubs of the pool.",
                tuple(
                    q(
                        f"histogram_quantile({p}, sum by (le) (rate("
                        f"hedwig_publish_latency_seconds_bucket{{{SEL}}}[$__rate_interval])))",
                        f"p{round(p * 100)}",
                    )
                    for p in (0.5, 0.95, 0.99)
                ),
                unit="s",
                width=6,
            ),
            Panel(
                "Subscriber backlog (top 10)",
                "Messages published but not yet consumed, per subscription.",
                (
                    q(
                        "topk(10, sum by (topic, subscriber) "
                        f"(hedwig_subscriber_backlog{{{SEL}}}))",
                        "{{topic}} / {{subscriber}}",
                    ),
                ),
                width=6,
                decimals=0,
            ),
            Panel(
                "Connections per hub",
                "Open client connections.",
                (q(f"sum by (pod) (hedwig_connections{{{SEL}}})", "{{pod}}"),),
                width=6,
                decimals=0,
            ),
        ),
    ),
    (
        "Health",
        (
            Panel(
                "Hubs up",
                "Hubs Prometheus scrapes successfully, and hubs it cannot reach.",
                (
                    q(f'count by (pool) (up{{job="hedwig-hub", {SEL}}} == 1)', "up"),
                    q(f'count by (pool) (up{{job="hedwig-hub", {SEL}}} == 0)', "down"),
                ),
                width=6,
                decimals=0,
            ),
            Panel(
                "ZooKeeper session state",
                "Hubs per ZooKeeper session state: connected; suspended (no publishes, no "
                "claims until it reconnects); lost (the hub dropped its topics).",
                (
                    q(
                        f"sum by (state) (hedwig_zk_session_state{{{SEL}}})",
                        "{{state}}",
                    ),
                ),
                width=6,
                decimals=0,
            ),
            Panel(
                "Ledger replication",
                "Ledgers left under-replicated after each hub's last audit, and ledgers "
                f"repaired (replicas re-created or caught up) per {EVENT_WINDOW}.",
                (
                    q(
                        f"sum by (pool) (hedwig_ledgers_under_replicated{{{SEL}}})",
                        "under-replicated",
                    ),
                    q(
                        f"sum by (pool) (increase(hedwig_ledger_repairs_total{{{SEL}}}"
                        f"[{EVENT_WINDOW}]))",
                        "repaired",
                    ),
                ),
                width=6,
                thresholds=((1, "red"),),
            ),
            Panel(
                "Storage syncs and redirects",
                "fdatasync calls of the group commit and requests redirected to a topic's "
                "owner, per second.",
                (
                    q(
                        f"sum by (pod) (rate(hedwig_storage_syncs_total{{{SEL}}}"
                        "[$__rate_interval]))",
                        "syncs {{pod}}",
                    ),
                    q(
                        f"sum by (pod) (rate(hedwig_redirects_total{{{SEL}}}[$__rate_interval]))",
                        "redirects {{pod}}",
                    ),
                ),
                unit="ops",
                width=6,
            ),
        ),
    ),
    (
        "Errors and lag",
        (
            Panel(
                "Request errors",
                "Requests answered with an error status, per second, by status (redirects and "
                "moves, which send a client on, are not errors). A rise in service_unavailable "
                "or not_enough_hubs is the region, in forbidden or unauthenticated its clients.",
                (
                    q(
                        or_zero(
                            "sum by (status) (rate(hedwig_requests_total"
                            f'{{{SEL}, status!~"{ROUTING}"}}[$__rate_interval]))'
                        ),
                        "{{status}}",
                    ),
                ),
                unit="ops",
                width=8,
            ),
            Panel(
                "Authentication and authorization denials",
                f"Requests refused by the trust boundary per {EVENT_WINDOW}, by reason "
                "(docs/security.md; each refusal is also a line of the hedwig.audit log).",
                (q(event_increase("hedwig_auth_denied", "reason"), "{{reason}}"),),
                width=8,
                decimals=0,
            ),
            Panel(
                "Subscriber lag growth (top 10)",
                "How fast each subscription's backlog grows, messages per second over "
                f"{EVENT_WINDOW}: above 0 for long, a subscriber that falls behind its topic "
                "(the backlog panel has the backlog itself).",
                (
                    q(
                        or_zero(
                            "topk(10, sum by (topic, subscriber) "
                            f"(deriv(hedwig_subscriber_backlog{{{SEL}}}[{EVENT_WINDOW}])))"
                        ),
                        "{{topic}} / {{subscriber}}",
                    ),
                ),
                unit="ops",
                width=8,
                min=None,
            ),
        ),
    ),
    (
        "Regions",
        (
            Panel(
                "Replication lag by linked region",
                "Messages of each linked region not yet applied in this one, summed over the "
                "topics a hub replicates from it (hedwig_replication_lag_messages; measured "
                "every 5 s per topic). It rises while a region is out of reach and falls back "
                "to 0 once replication catches up by itself. 0: no links, or nothing behind.",
                (
                    q(
                        or_zero(
                            f"sum by (pool, region) (hedwig_replication_lag_messages{{{SEL}}})"
                        ),
                        "{{pool}} from {{region}}",
                    ),
                ),
                width=8,
                decimals=0,
            ),
            Panel(
                "Replication lag (age)",
                "How old the oldest message delivered from each linked region and not yet "
                "applied here is (hedwig_replication_lag_seconds, the worst hub).",
                (
                    q(
                        or_zero(f"max by (pool, region) (hedwig_replication_lag_seconds{{{SEL}}})"),
                        "{{pool}} from {{region}}",
                    ),
                ),
                unit="s",
                width=8,
            ),
            Panel(
                "Replicated messages/s",
                "Messages appended here from each linked region (hedwig_replicated_messages), "
                "and how often a topic's replication failed and started again "
                "(hedwig_replication_errors: the region out of reach, a topic moving).",
                (
                    q(
                        or_zero(
                            "sum by (pool, region) (rate(hedwig_replicated_messages_total"
                            f"{{{SEL}}}[$__rate_interval]))"
                        ),
                        "{{pool}} from {{region}}",
                    ),
                    q(
                        or_zero(
                            "sum by (pool, region) (rate(hedwig_replication_errors_total"
                            f"{{{SEL}}}[$__rate_interval]))"
                        ),
                        "{{pool}} restarts from {{region}}",
                    ),
                ),
                unit="ops",
                width=8,
            ),
        ),
    ),
    (
        "Autoscaling",
        (
            Panel(
                "Hubs: desired, needed and bounds",
                "The pool autoscaler's view (HubPool spec.autoscaling; the operator's metrics): "
                "the hubs it wants now, the hubs the load needs at the target utilisation, and "
                "minReplicas and maxReplicas. Needed above max for long is a pinned pool (the "
                "HedwigPoolPinnedAtMaximum alert). 0: the pool is not autoscaled.",
                (
                    q(
                        or_zero(f"max by (pool, kind) (hedwig_pool_autoscaling_replicas{{{SEL}}})"),
                        "{{pool}} {{kind}}",
                    ),
                ),
                width=8,
                decimals=0,
            ),
            Panel(
                "Pool utilisation",
                "The region's load (messages/s in plus out) as a share of its serving hubs' "
                "capacity (spec.rebalancing.hubCapacity each): the autoscaler adds hubs while "
                "it stays above the target, drains one while one hub fewer would fit.",
                (
                    q(
                        or_zero(f"max by (pool) (hedwig_pool_autoscaling_utilisation{{{SEL}}})"),
                        "{{pool}}",
                    ),
                ),
                unit="percentunit",
                width=8,
                thresholds=((1.0, "red"),),
            ),
            Panel(
                "Scale decisions by action",
                f"What the autoscaler did per {EVENT_WINDOW}, by action (the Event reasons: "
                "ScalingOut, DrainStarted, DrainCancelled, ScalingIn, ScaleCompleted); the "
                "pool's Events say why each happened.",
                (
                    q(
                        or_zero(event_increase("hedwig_pool_autoscaling_decisions", "action")),
                        "{{action}}",
                    ),
                ),
                width=8,
                decimals=0,
            ),
        ),
    ),
)


def panels() -> list[Panel]:
    return [p for _, row in ROWS for p in row]


def queries() -> list[tuple[str, Query]]:
    """Every (panel title, query) of the dashboard."""
    return [(p.title, query) for p in panels() for query in p.queries]

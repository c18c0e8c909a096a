"""Per-topic rates for Prometheus, from the hub's last load report (``hedwig_topic_rate``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric

from hedwig.metadata.records import TopicLoad


class TopicRates:
    """``hedwig_topic_rate``, made when Prometheus scrapes from the last load report's topics.

    A gauge with four children per listed topic, set at every report, cost more than the
    report itself while topics were being claimed (the list changes at each one, five a
    second); a scrape comes every few seconds."""

    NAME = "hedwig_topic_rate"
    HELP = "EWMA rate per topic as in the hub's load report (messages or bytes per second)"
    LABELS = ("topic", "direction", "unit")

    def __init__(self) -> None:
        self.loads: Mapping[str, TopicLoad] = {}

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(self.NAME, self.HELP, labels=self.LABELS)

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(self.NAME, self.HELP, labels=self.LABELS)
        for topic, tl in self.loads.items():
            family.add_metric((topic, "in", "messages"), tl.msg_in)
            family.add_metric((topic, "out", "messages"), tl.msg_out)
            family.add_metric((topic, "in", "bytes"), tl.bytes_in)
            family.add_metric((topic, "out", "bytes"), tl.bytes_out)
        yield family

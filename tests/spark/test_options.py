"""Option parsing, offsets and planning: pure functions, no Spark session, no hubs."""

from __future__ import annotations

import pytest

from hedwig_spark.offsets import EARLIEST, LATEST, TopicBounds, normalise, parse_offset_spec
from hedwig_spark.options import parse_read_options, parse_write_options
from hedwig_spark.partitions import ranges_between, split_ranges
from hedwig_spark.stream_reader import _max_rows, next_offsets


def test_read_options_kafka_names() -> None:
    o = parse_read_options(
        {
            "HUBS": "a:1, b:2",
            "subscribe": "t1,t2,t1",
            "startingOffsets": '{"t1": 5, "t2": {"0": -2}}',
            "maxOffsetsPerTrigger": "100",
            "minPartitions": "4",
            "failOnDataLoss": "false",
        }
    )
    assert o.cluster.hubs == ("a:1", "b:2")
    assert o.topics == ("t1", "t2")
    assert o.starting is not None and o.starting.per_topic == {"t1": 5, "t2": EARLIEST}
    assert o.max_records_per_trigger == 100
    assert o.min_partitions == 4
    assert o.fail_on_data_loss is False


def test_default_start_is_earliest_for_batch_latest_for_streams() -> None:
    o = parse_read_options({"hubs": "a:1", "topic": "t"})
    assert o.batch_start.kind == "earliest"
    assert o.stream_start.kind == "latest"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "t"}, "hubs"),
        ({"hubs": "a:1"}, "exactly one"),
        ({"hubs": "a:1", "topic": "t", "topics": "u"}, "exactly one"),
        ({"hubs": "a:1", "topicPattern": "t.*"}, "zookeeper"),
        ({"hubs": "a:1", "topic": "t", "minPartitions": "0"}, "minPartitions"),
        ({"hubs": "a:1", "topic": "t", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"hubs": "a:1", "topic": "t", "startingOffsets": "[1]"}, "startingOffsets"),
        ({"hubs": "a:1", "topic": "t", "endingOffsets": "earliest"}, "endingOffsets"),
        ({"hubs": "a:1", "topic": "t", "startingOffsets": '{"t": -3}'}, "offset of"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_read_options(options)


def test_write_options() -> None:
    o = parse_write_options({"zookeeper": "z:2181", "region": "r", "topic": "out"})
    assert o.cluster.metadata == "z:2181" and o.cluster.region == "r"
    assert o.topic == "out" and o.writer_id is None


def test_the_metadata_url_by_its_name_and_its_aliases() -> None:
    for name in ("metadata", "zookeeper", "zk"):
        o = parse_read_options({name: "etcd://e:2379", "topicPattern": "t.*"})
        assert o.cluster.metadata == "etcd://e:2379"


def test_offset_spec_resolution() -> None:
    bounds = TopicBounds(first_available=10, last_seq=20)
    spec = parse_offset_spec('{"a": 15, "b": -1}', "starting")
    assert spec.resolve("a", bounds, default=EARLIEST) == 15
    assert spec.resolve("b", bounds, default=EARLIEST) == 21
    assert spec.resolve("c", bounds, default=EARLIEST) == 10
    assert spec.resolve("c", bounds, default=LATEST) == 21
    empty = TopicBounds(first_available=1, last_seq=0)
    assert (empty.earliest, empty.latest) == (1, 1)
    assert list(normalise({"b": 1, "a": 2})) == ["a", "b"]


def test_split_ranges_caps_rows_and_reaches_min_partitions() -> None:
    ranges = [("a", 1, 1001), ("b", 1, 11)]
    pieces = split_ranges(ranges, min_partitions=1, max_rows=300)
    assert [p for p in pieces if p[0] == "a"] == [
        ("a", 1, 251),
        ("a", 251, 501),
        ("a", 501, 751),
        ("a", 751, 1001),
    ]
    pieces = split_ranges([("a", 1, 101), ("b", 1, 3)], min_partitions=5, max_rows=10_000)
    assert len(pieces) == 5
    covered = sorted((t, s) for t, lo, hi in pieces for s in range(lo, hi))
    assert covered == [("a", s) for s in range(1, 101)] + [("b", 1), ("b", 2)]
    # never splits below one row
    assert len(split_ranges([("a", 1, 3)], min_partitions=10, max_rows=100)) == 2


def test_ranges_between_skips_empty_and_starts_new_topics_at_one() -> None:
    assert ranges_between({"a": 5, "b": 7}, {"a": 9, "b": 7, "c": 3}) == [
        ("a", 5, 9),
        ("c", 1, 3),
    ]


def test_next_offsets_shares_the_cap_by_backlog() -> None:
    bounds = {
        "busy": TopicBounds(1, 1000),
        "quiet": TopicBounds(1, 10),
        "new": TopicBounds(50, 60),
    }
    end = next_offsets({"busy": 1, "quiet": 1}, bounds, cap=101)
    assert end["new"] == 50  # enters at its earliest, with no rows this batch
    rows = (end["busy"] - 1) + (end["quiet"] - 1)
    assert rows == 101
    assert end["quiet"] > 1  # the quiet topic is not starved
    assert next_offsets({"busy": 1}, {"busy": TopicBounds(1, 1000)}, cap=None) == {"busy": 1001}
    # never backwards, even if a hub reports less than we planned
    assert next_offsets({"a": 50}, {"a": TopicBounds(1, 10)}, cap=None) == {"a": 50}


def test_read_limit_shapes() -> None:
    class ReadMaxRows:
        max_rows = 7

    assert _max_rows(None) is None
    assert _max_rows(ReadMaxRows()) == 7
    assert _max_rows({"maxRows": 3}) == 3
    assert _max_rows(object()) is None

"""BatchOffsets: Spark's offset log parsed once, handed typed to reliability, windows, sinks."""

from kstorm._runtime.batch import BatchOffsets


def test_kafka_ends_keep_only_kafka_partitions_over_every_spout():
    sources = {"events": {"clicks": {"0": 12, "1": 7}, "views": {"0": 3}},
               "more": {"clicks": {"2": 5}}, "list": {"batch": 4}, "other": None,
               "clocked": {"clicks": {"3": 1}, "@clocks": {"clicks/3": 99}}}
    offsets = BatchOffsets.parse(7, 1_000, sources, kafka_spouts={"events", "more", "clocked"})
    assert offsets.kafka_ends() == {"clicks": {0: 12, 1: 7, 2: 5, 3: 1}, "views": {0: 3}}
    assert offsets.ends_of("list") == {} and offsets.ends_of("missing") == {}
    assert offsets.marks_of("clocked") == {"@clocks": {"clicks/3": 99}}
    assert "other" not in offsets.spouts  # a source with no offset yet is left out


def test_a_list_spout_keeps_its_own_offset_and_marks():
    offsets = BatchOffsets.parse(2, 5, {"list": {"batch": 3, "@clocks": {"0": 8}}},
                                 kafka_spouts=set())
    assert offsets.ends_of("list") == {}
    assert offsets.marks_of("list") == {"@clocks": {"0": 8}}
    assert offsets.summary() == {"list": {"batch": 3}}
    assert offsets.timestamp_ms == 5 and offsets.batch_id == 2


def test_progress_shows_each_spout_offset_as_spark_logged_it_without_marks():
    offsets = BatchOffsets.parse(0, 0, {"k": {"t": {"0": 4}, "@acking": {"now": 1}}},
                                 kafka_spouts={"k"})
    assert offsets.summary() == {"k": {"t": {"0": 4}}}

"""The word-count benchmark's baseline reads a real topic and counts every word once."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from typing import Any

from bench.raw import consume_and_count_words
from kstorm._kafka.client import create_topic


def test_the_raw_word_count_counts_every_sentence_of_every_partition(
        kafka: Any, produce: Any) -> None:
    topic = f"raw-words-{uuid.uuid4().hex[:8]}"
    create_topic(kafka.bootstrap_servers, topic, partitions=3)
    sentences = [" ".join(f"w{(i * 7 + j) % 11}" for j in range(1 + i % 5)) for i in range(300)]
    ends = {}
    for partition in range(3):
        records = [json.dumps({"id": i, "sentence": s})
                   for i, s in enumerate(sentences) if i % 3 == partition]
        ends[partition] = len(produce(kafka.bootstrap_servers, topic, records, partition))
    raw = consume_and_count_words(kafka.bootstrap_servers, topic, ends, timeout_s=60)
    assert raw.sentences == 300
    assert raw.counts == Counter(w for s in sentences for w in s.split())
    assert raw.words == sum(len(s.split()) for s in sentences)
    assert raw.rate > 0

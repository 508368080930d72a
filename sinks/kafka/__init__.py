"""Exactly-once Kafka sink: each micro-batch is one Kafka transaction.

What a sink named ``out`` of topology ``wc`` keeps on the brokers, beside its output topic
(all three names are ``kstorm.wc.out`` unless ``transactional_id`` is given)::

    transactional.id  kstorm.wc.out    the producer; a restarted topology fences the old one
    consumer group    kstorm.wc.out    committed in each transaction:
                                         <source topic>[p] -> the batch's end offset
                                         kstorm.wc.out[0]  -> last committed txid + 1
    topic             kstorm.wc.out    1 partition, compacted; in each transaction:
                                         "commit"        -> {"txid": ..., "offsets": ...}
                                         "state:<name>:<i>" -> window state chunks

``kafka-consumer-groups --describe --group kstorm.wc.out`` shows how far the sink got.
Read the output with ``isolation.level=read_committed``: records of a batch become visible
together, once, when its transaction commits; a batch that failed or was replayed is not
seen twice.

Example:
    >>> from serdes import JsonSerde
    >>> KafkaSink("word-counts", key="word", value_serde=JsonSerde({"word": str, "count": int}))
    KafkaSink('word-counts', name=None)
"""

from .sink import KafkaSink

__all__ = ["KafkaSink"]

"""Kafka's public pieces: the connection every client and sink is built from, and the spout.

- :mod:`kstorm.kafka.connection`: :class:`~kstorm.kafka.connection.KafkaConnection`, the
  brokers, security and client settings (secrets kept as secrets), one librdkafka
  configuration per role;
- :mod:`kstorm.kafka.spout`: :class:`~kstorm.kafka.spout.KafkaSpout`, Storm's
  ``KafkaSpout`` whose message ids are offsets.

Both are exported from :mod:`kstorm` as well. Kafka clients of the engine live in the
private ``kstorm._kafka`` package.
"""

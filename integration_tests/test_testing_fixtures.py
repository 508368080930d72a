"""The pytest fixtures ``kstorm.testing`` ships, used as a user's project would use them."""

from __future__ import annotations

from typing import Any

pytest_plugins = ["pytester"]

USER_TESTS = '''
import redis
from confluent_kafka.admin import AdminClient

from kstorm import Fields, TopologyBuilder
from kstorm.testing import CaptureSink, ListSpout

pytest_plugins = ["kstorm.testing"]


def test_the_embedded_services(kstorm_kafka, kstorm_redis):
    assert redis.Redis.from_url(kstorm_redis.url).ping()
    admin = AdminClient({"bootstrap.servers": kstorm_kafka.bootstrap_servers})
    assert admin.list_topics(timeout=10).brokers


def test_the_driver_fixture(kstorm_driver):
    b = TopologyBuilder()
    b.set_spout("words", ListSpout([[("x",)]], Fields("word")))
    b.set_bolt("out", CaptureSink()).shuffle_grouping("words")
    driver = kstorm_driver(b.create_topology())
    driver.pipe("words", [["a"], ["b"]])
    assert driver.output("out") == [["a"], ["b"]]
'''


def test_a_users_suite_gets_a_broker_redis_and_test_drivers(pytester: Any) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)

"""The public API is exactly what ``kstorm.__all__`` lists (httpx's test of the same name)."""

import kstorm


def test_all_exports_exist_and_nothing_public_is_missing():
    exported = set(kstorm.__all__)
    for name in exported:
        assert hasattr(kstorm, name), name
    public = {n for n, v in vars(kstorm).items()
              if not n.startswith("_") and not isinstance(v, type(kstorm))}
    assert public == exported


def test_storm_names_are_there():
    for name in ("TopologyBuilder", "Fields", "Values", "Tuple", "BaseRichSpout",
                 "BaseRichBolt", "BaseBasicBolt", "BaseStatefulBolt", "KeyValueState",
                 "KafkaSpout", "submit_topology", "Config", "FailedException"):
        assert name in kstorm.__all__

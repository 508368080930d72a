"""A user's own ``StateProvider`` (seed 000: "a custom state should also provide a
StateProvider"), importable by Spark's Python workers: Redis-held state under a namespace
of its own, with a Redis address from the user's configuration (``user.state.redis``)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from kstorm.state.redis import RedisKeyValueState, RedisStateConfig


class TaggedRedisStateProvider:
    """``topology.state.provider = custom_state:TaggedRedisStateProvider``."""

    def new_state(self, namespace: str, conf: Any, context: Any) -> RedisKeyValueState:
        """The task's state under ``kstorm:state:custom/<namespace>``."""
        url = urlparse(conf["user.state.redis"])
        config = RedisStateConfig(host=url.hostname or "localhost", port=url.port or 6379)
        return RedisKeyValueState(f"custom/{namespace}", config)

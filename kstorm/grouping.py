"""Stream groupings: how a stream's tuples are spread over a bolt's tasks.

On Spark (see ``kstorm/_spark/plan.py``): shuffle, local-or-shuffle and none keep tuples in
the partition they arrive in (the bolt fuses into the upstream Python stage); fields becomes
a hash partitioning on the grouping fields; global a single partition; all a broadcast (one
copy per task).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kstorm.tuple import DEFAULT_STREAM, Fields


class GroupingKind(enum.Enum):
    """The Storm grouping kinds kstorm supports."""

    SHUFFLE = "shuffle"
    LOCAL_OR_SHUFFLE = "local_or_shuffle"
    NONE = "none"
    FIELDS = "fields"
    GLOBAL = "global"
    ALL = "all"

    @property
    def repartitions(self) -> bool:
        """Whether the grouping needs tuples moved between tasks (a Spark exchange)."""
        return self in (GroupingKind.FIELDS, GroupingKind.GLOBAL, GroupingKind.ALL)


@dataclass(frozen=True)
class Grouping:
    """A subscription of a bolt to ``component``'s ``stream``."""

    kind: GroupingKind
    component: str
    stream: str = DEFAULT_STREAM
    fields: Fields | None = None

    def __str__(self) -> str:
        extra = f" on {self.fields.to_list()}" if self.fields is not None else ""
        return f"{self.kind.value} grouping of {self.component}:{self.stream}{extra}"

"""storm-starter's example topologies, ported from Java to Python (issue #42).

One module per topology; each module's docstring names the Java files it ports and lists
every change beyond syntax, and why. ``tests/test_storm_starter.py`` runs each on the test
driver and checks Storm's output computed independently.

- :mod:`.exclamation`: ``ExclamationTopology``.
- :mod:`.word_count`: ``WordCountTopology`` (a Python split bolt for the multilang one).
- :mod:`.anchored_word_count`: ``AnchoredWordCount`` / ``ReliableWordCount``, and the
  explicitly anchoring ``SplitSentence`` of Storm's *Guaranteeing message processing*.
- :mod:`.rolling_top_words`: ``RollingTopWords`` (tick tuples, rankings).
- :mod:`.single_join`: ``SingleJoinExample`` (``SingleJoinBolt``, expiry by ticks).
- :mod:`.tools`: storm-starter's ``tools`` (``Rankings``, ``SlidingWindowCounter``, ...)
  and Storm's ``RotatingMap``.

What no port can change: a ``next_tuple`` spout runs as one instance whatever its
parallelism (``docs/limits.md``), so a spout declared with n tasks emits what one would.

Ported elsewhere: ``StatefulWindowingTopology`` and ``PersistentWindowingTopology``
(``examples/storm_windowing.py``), ``TransactionalGlobalCount`` and
``TransactionalWords`` (``examples/transactional_*.py``).
"""

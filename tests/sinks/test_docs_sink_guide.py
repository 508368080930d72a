"""The docs' sink guide (docs/sinks.md) shows the sink the tests run, as it is."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_sink_guide_shows_the_tests_sink_verbatim():
    guide = (ROOT / "docs" / "sinks.md").read_text()
    code = (ROOT / "integration_tests" / "sqlite_sink.py").read_text()
    shown = code[code.index("import json"):].rstrip()
    assert f"```python\n{shown}\n```" in guide

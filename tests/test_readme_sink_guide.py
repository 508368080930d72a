"""The README's "Writing a sink" shows the sink the tests run, as it is."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_shows_the_guides_sink_verbatim():
    readme = (ROOT / "README.md").read_text()
    code = (ROOT / "integration_tests" / "sqlite_sink.py").read_text()
    shown = code[code.index("import json"):].rstrip()
    assert f"```python\n{shown}\n```" in readme

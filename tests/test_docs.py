"""The README is a user's front door and the docs site builds: what a reader would notice.

The README stays short (at most 400 lines), cites Storm's documents by title, carries no
dated run logs, and every relative link in it and in docs/ leads to a file that exists.
The site builds with ``mkdocs build --strict`` (a broken link or anchor is an error), and the
configuration reference is what ``scripts/config_reference.py`` writes from the typed config.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))

# [text](target) outside code; images too. Fenced and inline code are stripped first.
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"```.*?```", re.S)
_CODE = re.compile(r"`[^`\n]*`")


def _links(path: Path) -> list[str]:
    text = _CODE.sub("", _FENCE.sub("", path.read_text()))
    return [m.group(1) for m in _LINK.finditer(text)]


def test_the_readme_is_at_most_400_lines() -> None:
    lines = README.read_text().count("\n")
    assert lines <= 400, f"README.md has {lines} lines: move the detail into docs/"


def test_the_readme_cites_storms_documents_by_title() -> None:
    text = README.read_text()
    assert not re.search(r"seed \d{3}", text, re.I), "cite Storm's documents by their titles"
    for page in PAGES:
        assert not re.search(r"seed \d{3}", page.read_text(), re.I), page.name


def test_the_readme_has_no_dates() -> None:
    dates = re.findall(r"\b20\d\d-[01]\d-[0-3]\d\b", README.read_text())
    assert not dates, f"dated run logs belong in bench/results/: {dates}"


def test_the_readme_keeps_the_two_commands() -> None:
    text = README.read_text()
    assert "pip install -e . && kstorm demo" in text
    assert "bash scripts/test.sh " in text
    assert (ROOT / "scripts" / "test.sh").exists()


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda p: p.name)
def test_every_relative_link_resolves(path: Path) -> None:
    broken = []
    for target in _links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL, or an anchor on the same page (mkdocs checks those)
        file = (path.parent / target.split("#", 1)[0]).resolve()
        if not file.exists():
            broken.append(target)
    assert not broken, f"{path.relative_to(ROOT)} links to missing files: {broken}"


def test_the_configuration_reference_is_current() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "config_reference.py"),
                           "--check"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_configuration_guide_explains_every_key() -> None:
    from kstorm.config import TopologyConfig

    guide = (DOCS / "configuration.md").read_text()
    missing = [info.alias for info in TopologyConfig.model_fields.values()
               if f"`{info.alias}`" not in guide]
    assert not missing, f"docs/configuration.md does not explain {missing}"


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    # mkdocs is in the dev extra (scripts/test.sh installs it): missing is a failure
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-4000:]
    for page in ("index.html", "configuration/index.html", "results/index.html"):
        assert (tmp_path / "site" / page).exists(), page

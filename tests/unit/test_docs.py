"""The README stays a newcomer's page and every link in the docs resolves (no JVM)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from ttl.config import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = sorted((REPO_ROOT / "docs").glob("*.md"))
PAGES = [README, REPO_ROOT / "CHANGELOG.md", *DOCS]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_anchor(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, flags=re.M)}


def test_the_readme_is_short_and_keeps_no_diary():
    lines = README.read_text().splitlines()
    assert len(lines) <= 400, f"README.md has {len(lines)} lines: move detail to docs/"
    for page in PAGES:
        dated = [h for h in re.findall(r"^#+ (.+)$", page.read_text(), flags=re.M)
                 if h.startswith("Later")]
        assert not dated, f"{page.name}: history belongs in git and CHANGELOG.md: {dated}"


def test_no_file_cites_a_document_the_repository_does_not_have():
    marker = "BRI" + "EF §"  # spelled apart so this file does not match itself
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True,
                             check=True).stdout.decode().split("\0")
    citing = [name for name in tracked if name and (REPO_ROOT / name).is_file()
              and marker in (REPO_ROOT / name).read_text(errors="ignore")]
    assert citing == [], f"cite docs/semantics.md instead: {citing}"


def test_every_relative_link_and_anchor_in_the_docs_resolves():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"^[a-z]+://", target) or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert broken == []

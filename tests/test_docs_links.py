"""The documentation is self-contained: no markdown file links outside the repository.

A relative link must resolve to a file inside the repository; a web link may only point at the dashboard on
localhost. Code (fenced blocks, inline code) is text, not links, so commands that name a URL stay allowed.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
_CODE_SPAN = re.compile(r"(`+).+?\1", re.S)
_TARGETS = [
    re.compile(r"\]\(\s*<([^>]*)>"),                      # [text](<target with spaces>)
    re.compile(r"\]\(\s*([^)\s<][^)\s]*)"),              # [text](target "title") and images
    re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)", re.M),  # [ref]: target
    re.compile(r"<([a-zA-Z][a-zA-Z0-9+.-]*:[^>\s]*)>"),    # <https://autolink>
    re.compile(r"(?:href|src)\s*=\s*[\"']([^\"']+)"),     # raw HTML
    re.compile(r"(?<![(<\w])((?:https?|ftp)://[^\s)>\]]+)"),  # bare URLs (GitHub links them)
]


def markdown_files() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [f for f in files if f.exists()]


def link_targets(text: str) -> list[str]:
    """Every link target in markdown ``text``, outside code."""
    text = _CODE_SPAN.sub("", _FENCE.sub("", text))
    found = []
    for pattern in _TARGETS:
        found += [m.group(1) for m in pattern.finditer(text)]
    return list(dict.fromkeys(found))


def outside_links(path: Path, text: str, root: Path = ROOT) -> list[str]:
    """The targets in ``text`` (a markdown file at ``path``) that leave the repository at ``root``."""
    bad = []
    for target in link_targets(text):
        if target.startswith("#"):
            continue
        parts = urlsplit(target)
        if parts.scheme:
            local = parts.scheme in ("http", "https") and (parts.hostname or "") in {"localhost", "127.0.0.1", "::1"}
            if not local:
                bad.append(target)
            continue
        if target.startswith("/"):
            bad.append(target)
            continue
        resolved = (path.parent / unquote(parts.path)).resolve()
        if not resolved.is_relative_to(root.resolve()) or not resolved.exists():
            bad.append(target)
    return bad


def test_the_checker_finds_links_that_leave_the_repository(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("")
    doc = tmp_path / "README.md"
    text = """See [A](docs/a.md#part), [B](<docs/a.md>), [here](#top), ![pic](docs/missing.png) and [design](../shared/DESIGN.md).
Open http://localhost:8501 or <http://127.0.0.1:8501/runs>; not https://example.com/x or [web](https://e.org).
[ref]: /etc/passwd
<a href="mailto:me@example.com">mail</a> `https://in-code.example` is code, and so is

```bash
pip install --index-url https://download.pytorch.org/whl/cpu torch
```
"""
    assert outside_links(doc, text, root=tmp_path) == [
        "docs/missing.png", "../shared/DESIGN.md", "https://e.org", "/etc/passwd", "mailto:me@example.com",
        "https://example.com/x"]


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_markdown_links_stay_inside_the_repository(path):
    assert outside_links(path, path.read_text(encoding="utf-8")) == []


_BARE_PIP = re.compile(r"(?<![/\w.])pip3? install")


def test_install_hints_name_the_virtual_environments_pip():
    """What the code tells a user to install says `.venv/bin/pip install`, as the README does (a bare `pip`
    may be another Python's)."""
    sources = [ROOT / "README.md", *sorted((ROOT / "placement_core").rglob("*.py")),
               *sorted((ROOT / "dashboard").rglob("*.py")), *sorted((ROOT / "app_pages").glob("*.py"))]
    bare = [f"{p.relative_to(ROOT)}:{n}" for p in sources
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if _BARE_PIP.search(line)]
    assert bare == []
    assert _BARE_PIP.search('fix="pip install -e .[torch]"') and not _BARE_PIP.search("`.venv/bin/pip install -e .`")

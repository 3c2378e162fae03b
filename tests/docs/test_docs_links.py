"""The docs site's links: ``mkdocs build --strict`` (run by ``.ci/run``) fails on a link
mkdocs warns about, and mkdocs.yml's ``validation`` makes every kind of link problem a
warning. One kind mkdocs reports at INFO whatever ``validation`` says: a link to a page
left out of the site (``exclude_docs``: the generated results tables, which pages include
as snippets). This test fails on those."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason='needs pip install -e ".[docs]"')
yaml = pytest.importorskip("yaml")

from mkdocs.config import load_config  # noqa: E402
from mkdocs.structure.files import get_files  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
"""A Markdown link's target (an optional title after it)."""


def test_every_link_problem_fails_the_strict_build() -> None:
    validation = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["validation"]
    for key in ("not_found", "absolute_links", "unrecognized_links", "anchors"):
        assert validation.get(key) == "warn", key


def test_no_page_links_a_page_left_out_of_the_site() -> None:
    config = load_config(str(ROOT / "mkdocs.yml"))
    files = get_files(config)
    excluded = {f.src_uri for f in files if f.inclusion.is_excluded()}
    assert "results/longform_monitor.md" in excluded  # what exclude_docs leaves out
    wrong = []
    for page in files:
        if not page.is_documentation_page() or page.inclusion.is_excluded():
            continue
        text = Path(page.abs_src_path or "").read_text(encoding="utf-8")
        for target in LINK.findall(text):
            path = target.split("#", 1)[0]
            if not path or re.match(r"^[a-z][a-z0-9+.-]*:", path):  # an anchor, a URL
                continue
            uri = posixpath.normpath(posixpath.join(posixpath.dirname(page.src_uri), path))
            if uri in excluded:
                wrong.append(f"docs/{page.src_uri}: {target}")
    assert not wrong, f"links to pages left out of the site (link a page including them): {wrong}"

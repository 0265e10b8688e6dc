"""The HTML of a PEP 503 simple index (repository version 1.0).

Two indexes share it: the local ``wheels/simple`` the index stage writes, and the one CI
publishes on GitHub Pages (``ci/publish_index.py``), so pip reads the same pages from both.
"""

from __future__ import annotations

import html
from collections.abc import Iterable


def page(title: str, body: str) -> str:
    """An HTML page of the simple repository API (PEP 503, repository version 1.0)."""
    return (
        '<!DOCTYPE html>\n<html>\n  <head>\n    <meta name="pypi:repository-version" content="1.0">\n'
        f"    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n{body}  </body>\n</html>\n"
    )


def _links_page(title: str, links: list[str]) -> str:
    body = "".join(f"    {link}<br/>\n" for link in links)
    return page(title, f"    <h1>{html.escape(title)}</h1>\n{body}")


def project_page(project: str, files: Iterable[tuple[str, str, str]]) -> str:
    """A project's PEP 503 page; ``files`` holds (URL, file name, sha256) triples."""
    links = [
        f'<a href="{html.escape(url)}#sha256={sha}">{html.escape(filename)}</a>'
        for url, filename, sha in files
    ]
    return _links_page(f"Links for {project}", links)


def root_page(projects: Iterable[str]) -> str:
    """The PEP 503 root page listing ``projects`` (normalized names)."""
    return _links_page("Simple index", [f'<a href="{name}/">{name}</a>' for name in projects])

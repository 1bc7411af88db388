"""MkDocs hooks of the site (mkdocs.yml `hooks:`): the options pages must hold the tables the code defines now."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mkdocs.exceptions import PluginError
from options_reference import TABLES, page_table


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Fail the build when a page's options table differs from the option definitions in the code."""
    source = Path(page.file.abs_src_path).resolve()
    for path, begin, end, render in TABLES:
        if source == path and page_table(markdown, begin, end) != render():
            raise PluginError(
                f"docs/{path.name}: the options table differs from the code's option definitions; "
                "run python tools/options_reference.py --write"
            )
    return markdown

"""MkDocs hooks of the site (mkdocs.yml `hooks:`): the options page must hold the table the code defines now."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mkdocs.exceptions import PluginError
from options_reference import PAGE, page_table, render_table


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Fail the build when docs/options.md's table differs from the option definitions in the code."""
    if Path(page.file.abs_src_path).resolve() == PAGE and page_table(markdown) != render_table():
        raise PluginError(
            "docs/options.md: the options table differs from the code's option definitions; "
            "run python tools/options_reference.py --write"
        )
    return markdown

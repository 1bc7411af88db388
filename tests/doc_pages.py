"""The documentation's Markdown as the tests read it: pages, fenced code blocks, the options generator."""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: Every page a user reads: the README and the site's pages.
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
#: Fenced blocks the tests run; ```py marks a Python block that cannot run here (its first line says why).
RUNNABLE = "python"
NOT_RUN = "py"
NOT_RUN_PREFIX = "# not run:"

_FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^`\n]*)\n(?P<code>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)


@dataclass(frozen=True)
class CodeBlock:
    page: Path
    line: int
    language: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def code_blocks(page: Path) -> list[CodeBlock]:
    """The page's fenced code blocks, in order, with the line of their opening fence."""
    text = page.read_text(encoding="utf-8")
    blocks = []
    for m in _FENCE.finditer(text):
        language = m.group("info").strip().split(" ")[0] if m.group("info").strip() else ""
        line = text.count("\n", 0, m.start()) + 1
        blocks.append(CodeBlock(page, line, language, m.group("code")))
    return blocks


def options_reference() -> ModuleType:
    """tools/options_reference.py, the generator of docs/options.md's table."""
    name = "options_reference"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / "options_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

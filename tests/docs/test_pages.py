"""The documentation against the code: the generated options table, every default a page states, the
code-block convention, the nav, and the README's size."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from doc_pages import DOCS, NOT_RUN, NOT_RUN_PREFIX, PAGES, ROOT, RUNNABLE, code_blocks, options_reference

# `name` (default 120000, ...) / `name` (default `true`) / `name` (4 MiB by default)
_MENTION = re.compile(r"`(?P<name>[a-z][a-z0-9_]*)`[ \t]*\((?P<inner>[^()]*)\)")
_NUMBER = re.compile(r"^`?(?P<n>\d[\d,]*(?:\.\d+)?)`?\s*(?P<unit>ms|s|seconds|minutes|min|KiB|MiB|bytes)?$")
_LITERAL = re.compile(r"^`(?P<v>[^`]+)`$")
_TO_MS = {None: 1, "ms": 1, "s": 1000, "seconds": 1000, "min": 60_000, "minutes": 60_000}
_TO_BYTES = {None: 1, "bytes": 1, "KiB": 1024, "MiB": 1024 * 1024}


def _stated_value(name: str, text: str) -> object | None:
    """What a page says the default is, in the option's own unit; None when the words are not a value."""
    if m := _LITERAL.match(text):
        value = m.group("v")
        if value in ("true", "false"):
            return value == "true"
        text = value
        if not _NUMBER.match(value):
            return value
    m = _NUMBER.match(text)
    if m is None:
        return None
    number, unit = float(m.group("n").replace(",", "")), m.group("unit")
    table = _TO_MS if name.endswith("_ms") else _TO_BYTES
    if unit not in table:
        return None
    return round(number * table[unit])


def stated_defaults(pages: list[Path], root: Path = ROOT) -> list[tuple[str, str, object, str]]:
    """(where, option, stated value, words) for every "(default X)" / "(X by default)" after an option's name."""
    known = {row.name for row in options_reference().collect()}
    found = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for m in _MENTION.finditer(text):
            if m.group("name") not in known:
                continue
            for part in re.split(r"[,;]", m.group("inner")):
                words = part.strip()
                said = re.match(r"^default:?\s+(?P<v>.+)$", words) or re.match(r"^(?P<v>.+?)\s+by default$", words)
                if said is None:
                    continue
                value = _stated_value(m.group("name"), said.group("v").strip())
                if value is not None:
                    line = text.count("\n", 0, m.start()) + 1
                    found.append((f"{page.relative_to(root)}:{line}", m.group("name"), value, words))
    return found


def test_the_options_table_is_what_the_code_defines_now() -> None:
    ref = options_reference()
    page = ref.page_table(ref.PAGE.read_text(encoding="utf-8"))
    assert page == ref.render_table(), "docs/options.md is out of date: run python tools/options_reference.py --write"


def test_the_reading_options_table_is_what_the_code_defines_now() -> None:
    ref = options_reference()
    page = ref.page_table(ref.READ_PAGE.read_text(encoding="utf-8"), ref.READ_BEGIN, ref.READ_END)
    stale = "docs/reading.md is out of date: run python tools/options_reference.py --write"
    assert page == ref.render_read_table(), stale


def test_every_option_has_a_meaning_in_the_code() -> None:
    ref = options_reference()
    missing = [row.name for row in ref.collect() + ref.collect_reading() if not row.meaning]
    assert not missing, f"give these options a #: comment above their field (it is their docs): {missing}"


def test_the_table_lists_every_option_with_the_codes_default() -> None:
    from spark_rocketmq.client.config import ProducerConfig
    from spark_rocketmq.spark.options import SinkOptions

    table = options_reference().render_table()
    for cls in (ProducerConfig, SinkOptions):
        for name in cls.__dataclass_fields__:
            default = getattr(cls(), name) if name != "namesrv_addr" else None
            row = next(line for line in table.splitlines() if line.startswith(f"| `{name}` |"))
            shown = options_reference().format_default(default)
            assert f"| `{shown}` |" in row or (default is None and "| — |" in row), (name, row)


def test_every_default_a_page_states_is_the_codes() -> None:
    defaults = {row.name: row.default for row in options_reference().collect()}
    stated = stated_defaults(PAGES)
    assert len(stated) >= 2, "the checker found no stated default: its patterns no longer match the pages"
    wrong = [
        f"{where}: `{name}` ({words}) but the code's default is {defaults[name]!r}"
        for where, name, value, words in stated
        if value != defaults[name]
    ]
    assert not wrong, "\n".join(wrong)


def test_the_default_checker_reads_what_a_drifted_page_says(tmp_path: Path) -> None:
    page = tmp_path / "drift.md"
    page.write_text("Rows wait until `delivery_timeout_ms` (default 3 minutes) and `use_tls` (`true` by default).\n")
    assert [(name, value) for _, name, value, _ in stated_defaults([page], tmp_path)] == [
        ("delivery_timeout_ms", 180_000),
        ("use_tls", True),
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_python_blocks_run_or_say_why_not(page: Path) -> None:
    for block in code_blocks(page):
        if block.language == NOT_RUN:
            assert block.code.startswith(NOT_RUN_PREFIX), (
                f"{block.where}: a ```py block is not run; its first line must say why ({NOT_RUN_PREFIX} ...)"
            )
        assert block.language not in ("python3", "pycon", "ipython"), (
            f"{block.where}: fence Python as ```{RUNNABLE} (run by the tests) or ```{NOT_RUN} (not run, saying why)"
        )


def test_every_page_of_the_nav_exists() -> None:
    nav = re.findall(r":\s*([\w./-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M)
    assert nav, "no page found in mkdocs.yml's nav"
    missing = [name for name in nav if not (DOCS / name).is_file()]
    assert not missing, f"pages named in mkdocs.yml's nav that docs/ lacks: {missing}"


def test_the_readme_is_a_landing_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250, "README.md is over 250 lines: move the detail to a page under docs/"
    for command in ("make run", "make test"):
        assert f"\n{command} " in readme, f"the README shows `{command}` on a line of its own"
    # the versions table docs/getting-started.md and docs/index.md include
    assert "<!-- --8<-- [start:versions] -->" in readme and "<!-- --8<-- [end:versions] -->" in readme

"""What the tier checks in a topic read back by the kit's Java consumer (`Kit.dump`: one dict a message)."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from typing import Any


def sha256(body: bytes | str) -> str:
    return hashlib.sha256(body.encode() if isinstance(body, str) else body).hexdigest()


def body_counts(stored: Iterable[dict[str, Any]]) -> Counter[str]:
    """How many stored messages carry each body, by its SHA-256."""
    return Counter(m["bodySha256"] for m in stored)


def assert_each_body_once(stored: list[dict[str, Any]], bodies: Iterable[bytes | str]) -> None:
    """Every expected body stored exactly once, and nothing else stored."""
    expected = Counter(sha256(b) for b in bodies)
    got = body_counts(stored)
    missing = sum((expected - got).values())
    extra = sum((got - expected).values())
    assert (missing, extra) == (0, 0), f"{missing} expected messages missing, {extra} unexpected or repeated stored"


def assert_each_row_delivered(stored: list[dict[str, Any]], bodies: Iterable[bytes | str]) -> int:
    """At least once: every expected body stored, each copy of one row under the same UNIQ_KEY, nothing else.

    Returns how many copies beyond one were stored (a request a broker stored after its answer was lost).
    """
    expected = Counter(sha256(b) for b in bodies)
    got = body_counts(stored)
    missing = [h for h in expected if h not in got]
    assert not missing, f"{len(missing)} of {len(expected)} rows never stored"
    unexpected = [h for h in got if h not in expected]
    assert not unexpected, f"{len(unexpected)} stored bodies belong to no row"
    ids: dict[str, set[str]] = {}
    for m in stored:
        ids.setdefault(m["bodySha256"], set()).add(m["uniq"])
    split = [h for h, uniq in ids.items() if len(uniq) != 1]
    assert not split, f"{len(split)} rows stored under more than one UNIQ_KEY"
    return sum(got.values()) - len(expected)

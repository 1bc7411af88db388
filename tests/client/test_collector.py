"""fewer_collections: the collector's thresholds raised while held, and given back as they were."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from spark_rocketmq.client.collector import YOUNG_THRESHOLD, fewer_collections


@pytest.fixture(autouse=True)
def default_thresholds() -> Iterator[None]:
    before, enabled = gc.get_threshold(), gc.isenabled()
    gc.set_threshold(700, 10, 10)
    gc.enable()
    yield
    gc.set_threshold(*before)
    if enabled:  # as it was: a test may have turned it off
        gc.enable()
    else:
        gc.disable()


def test_thresholds_are_raised_while_held_and_restored_after() -> None:
    with fewer_collections():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_restored_when_the_block_raises() -> None:
    with pytest.raises(ValueError), fewer_collections():
        raise ValueError("boom")
    assert gc.get_threshold() == (700, 10, 10)


def test_overlapping_holders_on_two_threads_restore_once_the_last_leaves() -> None:
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        with fewer_collections():
            entered.set()
            release.wait(10)

    other = threading.Thread(target=hold)
    with fewer_collections():
        other.start()
        assert entered.wait(10)
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD  # the other thread still holds it
    release.set()
    other.join(10)
    assert gc.get_threshold() == (700, 10, 10)


def test_as_a_decorator_each_call_holds_it() -> None:
    @fewer_collections()
    def seen() -> int:
        return gc.get_threshold()[0]

    assert seen() == YOUNG_THRESHOLD
    assert seen() == YOUNG_THRESHOLD
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.parametrize("setting", ["disabled", "rarer", "off by threshold"])
def test_a_collector_set_otherwise_is_left_alone(setting: str) -> None:
    expected = {"disabled": (700, 10, 10), "rarer": (500_000, 5, 5), "off by threshold": (0, 10, 10)}[setting]
    gc.set_threshold(*expected)
    if setting == "disabled":
        gc.disable()
    with fewer_collections():
        assert gc.get_threshold() == expected
    assert gc.get_threshold() == expected

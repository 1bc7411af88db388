"""The retry policies: waits per attempt and the time limit, on a clock the test gives."""

from __future__ import annotations

import pytest

from spark_rocketmq.client.policy import BUSY_BACKOFF, PUBLISHED_CHECK_BACKOFF, Backoff, resend_backoff


def test_busy_backoff_doubles_from_50_ms_to_1_s() -> None:
    assert [BUSY_BACKOFF.delay(n) for n in range(1, 9)] == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])
    assert BUSY_BACKOFF.delay(10_000) == 1.0  # a long run of busy answers does not overflow


def test_busy_backoff_has_no_time_limit_of_its_own() -> None:
    # the send's deadline (send_msg_timeout_ms) ends it in the engine
    assert BUSY_BACKOFF.next_try(3, started=0.0, now=1e9) == pytest.approx(1e9 + 0.2)


def test_published_check_backoff_doubles_from_half_a_second_to_5_s() -> None:
    assert [PUBLISHED_CHECK_BACKOFF.delay(n) for n in range(1, 7)] == pytest.approx([0.5, 1.0, 2.0, 4.0, 5.0, 5.0])


def test_resend_waits_double_from_100_ms_to_2_s() -> None:
    policy = resend_backoff(120.0)
    at = [policy.next_try(n, started=100.0, now=110.0) for n in range(1, 8)]
    assert at == pytest.approx([110.1, 110.2, 110.4, 110.8, 111.6, 112.0, 112.0])


def test_resend_is_never_later_than_the_delivery_deadline() -> None:
    policy = resend_backoff(30.0)
    assert policy.next_try(6, started=100.0, now=129.5) == pytest.approx(130.0)  # 2 s wanted, 0.5 s left
    assert policy.next_try(1, started=100.0, now=129.99) == pytest.approx(130.0)


def test_no_resend_once_the_delivery_time_is_up() -> None:
    policy = resend_backoff(30.0)
    assert policy.next_try(4, started=100.0, now=130.0) is None
    assert policy.next_try(1, started=100.0, now=200.0) is None
    assert policy.next_try(1, started=100.0, now=129.999) is not None


def test_a_backoff_refuses_waits_that_make_no_sense() -> None:
    with pytest.raises(ValueError, match="first_s=0"):
        Backoff(first_s=0, max_s=1.0)
    with pytest.raises(ValueError, match=r"max_s=0\.5"):
        Backoff(first_s=1.0, max_s=0.5)

from __future__ import annotations

import socket
import time

from spark_rocketmq.client.identity import UniqIdGenerator, fake_ipv4, local_ipv4, make_client_id
from spark_rocketmq.protocol.uniq_id import check_uniq_id, month_start_ms, uniq_id_time_offset


def test_ids_follow_the_uniq_key_layout() -> None:
    gen = UniqIdGenerator(ip="192.0.2.2", pid=15430, instance_hash=0x5FFD2B27)
    before = time.time_ns() // 1_000_000
    first = gen.next_id()
    after = time.time_ns() // 1_000_000
    assert check_uniq_id(first) == first
    assert first.startswith("C00002023C465FFD2B27")
    month = month_start_ms(before)
    assert before - month <= uniq_id_time_offset(first) <= after - month
    assert first.endswith("0000")
    more = gen.next_ids(3)
    assert [i[-4:] for i in more] == ["0001", "0002", "0003"]
    assert len({first, *more}) == 4


def test_a_large_batch_of_ids_never_repeats_one() -> None:
    """65,536 counters per millisecond: more ids than that take the next milliseconds' time fields,
    never a (time, counter) pair twice and never a time later than the clock when they were made."""
    ticks = iter(range(_MID_MONTH_MS, _MID_MONTH_MS + 10_000, 1))
    clock_reads: list[int] = []

    def clock() -> int:
        clock_reads.append(next(ticks))
        return clock_reads[-1]

    gen = UniqIdGenerator(ip="192.0.2.2", pid=1, instance_hash=2, clock=clock)
    gen.next_ids(65_000)
    ids = gen.next_ids(200_000)
    assert len(set(ids)) == 200_000
    month = month_start_ms(_MID_MONTH_MS)
    assert max(uniq_id_time_offset(i) for i in ids) <= clock_reads[-1] - month
    assert [i[-4:] for i in ids[:2]] == [f"{65_000:04X}", f"{65_001:04X}"]


def test_default_generator_uses_a_non_loopback_address() -> None:
    ip = local_ipv4()
    gen = UniqIdGenerator()
    if ip is not None:
        assert not ip.startswith("127.")
        assert gen.prefix.startswith(socket.inet_aton(ip).hex().upper())
    assert len(fake_ipv4()) == 4


def test_client_id_is_ip_at_instance() -> None:
    cid = make_client_id("1234#99", "unit")
    ip, instance, unit = cid.split("@")
    assert (instance, unit) == ("1234#99", "unit")
    socket.inet_aton(ip)


# -- month rollover (injected clock) -------------------------------------------------------------
#: 2026-11-22, mid-month: the rollover tests step over the end of that month.
_MID_MONTH_MS = 1_795_373_996_095


def _next_month_start(ms: int) -> int:
    return month_start_ms(month_start_ms(ms) + 32 * 86_400_000)


def test_time_field_restarts_at_the_month_boundary() -> None:
    boundary = _next_month_start(_MID_MONTH_MS)
    now = [boundary - 1]
    gen = UniqIdGenerator(ip="192.0.2.2", pid=1, instance_hash=2, clock=lambda: now[0])
    last_of_month = gen.next_id()
    assert uniq_id_time_offset(last_of_month) == boundary - 1 - month_start_ms(boundary - 1)
    now[0] = boundary + 5
    assert uniq_id_time_offset(gen.next_id()) == 5
    assert uniq_id_time_offset(gen.next_ids(2)[1]) == 5
    now[0] = boundary + 86_400_000
    assert uniq_id_time_offset(gen.next_id()) == 86_400_000


def test_a_reader_during_the_rollover_never_gets_a_time_field_past_the_send() -> None:
    """Whatever month bounds the generator stores while it rolls over, an id taken right after a
    store (as a thread reading them without the lock would) has the send's own ms-since-month-start,
    never more."""
    boundary = _next_month_start(_MID_MONTH_MS)
    now = [boundary - 1]
    seen: list[int] = []

    class Observed(UniqIdGenerator):
        armed = False

        def __setattr__(self, name: str, value: object) -> None:
            super().__setattr__(name, value)
            if self.armed and name == "_month":
                seen.append(uniq_id_time_offset(self.next_id()))

    gen = Observed(ip="192.0.2.2", pid=1, instance_hash=2, clock=lambda: now[0])
    gen.next_id()  # the old month is set up
    now[0] = boundary + 5
    gen.armed = True
    assert uniq_id_time_offset(gen.next_id()) == 5
    gen.armed = False
    assert seen, "the rollover stored nothing"
    assert set(seen) == {5}

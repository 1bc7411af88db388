from __future__ import annotations

import socket
import time

from spark_rocketmq.client.ids import UniqIdGenerator, fake_ipv4, local_ipv4, make_client_id
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

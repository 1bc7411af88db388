from __future__ import annotations

import pytest

from spark_rocketmq import ConfigError, ProducerConfig


def test_defaults_mirror_default_mq_producer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)
    c = ProducerConfig()
    assert c.group == "DEFAULT_PRODUCER"
    assert c.send_msg_timeout_ms == 3000
    assert c.retry_times_when_send_failed == 2
    assert c.max_message_size == 4 * 1024 * 1024
    assert c.compress_msg_body_over == 4096
    assert c.create_topic_key == "TBW102"
    assert c.send_latency_fault_enable is True
    with pytest.raises(ConfigError, match="NAMESRV_ADDR"):
        _ = c.namesrv_addrs


def test_namesrv_addr_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NAMESRV_ADDR", "10.0.0.1:9876;10.0.0.2:9876")
    assert ProducerConfig().namesrv_addrs == ["10.0.0.1:9876", "10.0.0.2:9876"]
    assert ProducerConfig(namesrv_addr="h:1").namesrv_addrs == ["h:1"]


def test_from_mapping_accepts_camel_case_any_case_and_strings() -> None:
    c = ProducerConfig.from_mapping(
        {
            "namesrvaddr": "a:1;b:2",
            "producerGroup": "orders",
            "SENDMSGTIMEOUT": "5000",
            "retryTimesWhenSendFailed": "4",
            "compressMsgBodyOverHowmuch": "100",
            "sendLatencyFaultEnable": "false",
            "use_tls": "true",
            "max_in_flight": 8,
        }
    )
    assert c.namesrv_addrs == ["a:1", "b:2"]
    assert (c.group, c.send_msg_timeout_ms, c.retry_times_when_send_failed) == ("orders", 5000, 4)
    assert c.compress_msg_body_over == 100
    assert c.send_latency_fault_enable is False and c.use_tls is True
    assert c.max_in_flight == 8


def test_from_mapping_unknown_keys() -> None:
    with pytest.raises(ConfigError, match=r"unknown producer option.*'topik'.*valid options: namesrv_addr"):
        ProducerConfig.from_mapping({"topik": "x"})
    c = ProducerConfig.from_mapping({"topic": "x", "group": "g"}, ignore={"TOPIC"})
    assert c.group == "g"
    known, unknown = ProducerConfig.split_mapping({"topic": "x", "producerGroup": "g"})
    assert known == {"group": "g"} and unknown == {"topic": "x"}


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"sendMsgTimeout": "soon"}, "send_msg_timeout_ms"),
        ({"send_msg_timeout_ms": 0}, "send_msg_timeout_ms"),
        ({"retry_times_when_send_failed": -1}, "retry_times_when_send_failed"),
        ({"namesrv_addr": "localhost"}, "namesrv_addr"),
        ({"use_tls": "maybe"}, "use_tls"),
        ({"group": ""}, "group"),
        ({"access_key": "ak"}, "access_key and secret_key"),
        ({"group": "g", "producerGroup": "h"}, "given twice"),
    ],
)
def test_bad_values_name_the_option(options: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        ProducerConfig.from_mapping(options)


def test_fingerprint_is_stable_and_tracks_every_field() -> None:
    a = ProducerConfig(namesrv_addr="h:1", group="g")
    assert a.fingerprint() == ProducerConfig.from_mapping({"namesrvAddr": "h:1", "producerGroup": "g"}).fingerprint()
    assert a.fingerprint() != a.replace(max_in_flight=3).fingerprint()
    assert "secret" not in repr(ProducerConfig(access_key="ak", secret_key="secret"))

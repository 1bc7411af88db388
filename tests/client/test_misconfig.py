@pytest.mark.parametrize(
    ("code", "remark", "says"),
    [
        (1, "org.apache.rocketmq.acl.common.AclException: No accessKey is configured, org.apache.x", "set access_key"),
        (
            1,
            "org.apache.rocketmq.acl.common.AclException: Check signature failed for accessKey=a, x",
            "secret_key is not",
        ),
        (1, "org.apache.rocketmq.acl.common.AclException: No default permission for topic:T, x", "may not publish"),
        (13, "the message is illegal, ... msg body length limit 65536B, msg properties length limit 32KB.", "is 65536"),
        (1, "java.lang.RuntimeException: message body size exceeded, org.apache.rocketmq.store.X", "is smaller"),
    ],
    ids=["acl-no-key", "acl-signature", "acl-topic", "size-4x", "size-5x-batch"],
)
def test_refusals_that_name_their_fix(code: int, remark: str, says: str) -> None:
    error = explain_refusal(BrokerError(code, remark, "127.0.0.1:10911"), "broker-a", 100_000, 4 << 20)
    assert isinstance(error, ClusterConfigError) and says in str(error)
    assert str(error).startswith("broker broker-a at 127.0.0.1:10911 refused")


@pytest.mark.parametrize(
    ("code", "remark"),
    [(2, "[TIMEOUT_CLEAN_QUEUE]broker busy"), (13, "msg body length limit 4194304B"), (1, "store broken")],
)
def test_other_refusals_are_left_as_they_are(code: int, remark: str) -> None:
    assert explain_refusal(BrokerError(code, remark, "127.0.0.1:10911"), "broker-a", 1000, 4 << 20) is None

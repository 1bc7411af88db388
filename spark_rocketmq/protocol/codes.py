"""Request, response and language codes of the RocketMQ remoting protocol (4.9.x numbering)."""

from __future__ import annotations

from enum import IntEnum

#: MQVersion.Version.V4_9_8.ordinal(): what a 4.9.8 client writes in every header.
MQ_VERSION_V4_9_8 = 409
#: MQVersion.Version.V4_9_4.ordinal(): from this request version on, the NameServer answers route
#: queries in standard JSON (quoted integer map keys).
MQ_VERSION_V4_9_4 = 401


class RequestCode(IntEnum):
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320
    #: 5.3.2 on: cancel a timer message before it is due.
    RECALL_MESSAGE = 370


class ResponseCode(IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    #: 5.x only (4.9.8 answers SYSTEM_ERROR where 5.x answers this).
    INVALID_PARAMETER = 29
    NO_BUYER_ID = 204
    NOT_IN_CURRENT_UNIT = 205
    FLOW_CONTROL = 215
    ILLEGAL_OPERATION = 604


class LanguageCode(IntEnum):
    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12


class SerializeType(IntEnum):
    JSON = 0
    ROCKETMQ = 1


#: Send answers that still mean "stored" (MQClientAPIImpl.processSendResponse).
SEND_OK_CODES = frozenset(
    {
        ResponseCode.SUCCESS,
        ResponseCode.FLUSH_DISK_TIMEOUT,
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
        ResponseCode.SLAVE_NOT_AVAILABLE,
    }
)

#: Broker answers on which DefaultMQProducerImpl.sendDefaultImpl tries another broker.
RETRY_ANOTHER_BROKER_CODES = frozenset(
    {
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.NO_PERMISSION,
        ResponseCode.NO_BUYER_ID,
        ResponseCode.NOT_IN_CURRENT_UNIT,
    }
)

#: Broker answers that mean "overloaded": retried after a short backoff.
BROKER_BUSY_CODES = frozenset({ResponseCode.SYSTEM_BUSY, ResponseCode.FLOW_CONTROL})


class Perm:
    """PermName: topic and broker permission bits."""

    INHERIT = 1
    WRITE = 2
    READ = 4
    READ_WRITE = 6

    @staticmethod
    def is_writeable(perm: int) -> bool:
        return bool(perm & Perm.WRITE)


class SysFlag:
    """MessageSysFlag bits."""

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_PREPARED = 0x4
    TRANSACTION_COMMIT = 0x8
    TRANSACTION_ROLLBACK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20
    #: 5.x BatchCQ records: a MessageBatch body to unwrap into its messages (both bits set).
    NEED_UNWRAP = 0x40
    INNER_BATCH = 0x80
    COMPRESSION_TYPE_MASK = 0x700
    #: compression type ZLIB (3) in bits 8..10, as 4.9.8 writes next to COMPRESSED.
    COMPRESSION_ZLIB = 3 << 8


#: Where a producer's ports of call are named by id: brokerId 0 is the master.
MASTER_ID = 0

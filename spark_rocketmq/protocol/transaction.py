"""Transactional messages on the wire (rocketmq-all-4.9.8): the half message's properties and sysFlag,
END_TRANSACTION (code 37) and CHECK_TRANSACTION_STATE (code 39).

A half message is a single message (SEND_MESSAGE_V2) with the TRANSACTION_PREPARED sysFlag and the
properties TRAN_MSG=true and PGROUP=<producer group> (DefaultMQProducerImpl.sendMessageInTransaction);
a broker refuses a prepared batch. The broker keeps it in RMQ_SYS_TRANS_HALF_TOPIC until an
END_TRANSACTION commits it (stored again in its real topic) or rolls it back; one it has no answer
for, it checks back on a producer of PGROUP with CHECK_TRANSACTION_STATE over that producer's own
connection, and the producer answers with END_TRANSACTION (fromTransactionCheck=true).

A 4.9.8 broker commits what END_TRANSACTION names each time it is told to (EndTransactionProcessor
looks the half up by commit-log offset only): a second COMMIT of one half publishes it twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache

from ..errors import InvalidMessageError, ProtocolError
from .codes import RequestCode, SerializeType, SysFlag
from .command import RemotingCommand, java_bool
from .ext_fields import ExtFieldsTemplate
from .javamap import hashmap_ordered
from .message import Message
from .requests import SendRequest, message_request

#: MessageConst.PROPERTY_TRANSACTION_PREPARED
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
#: MessageConst.PROPERTY_PRODUCER_GROUP
PROPERTY_PRODUCER_GROUP = "PGROUP"
#: MessageConst.PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS: no check-back before this many seconds.
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
#: MessageConst.PROPERTY_REAL_TOPIC / PROPERTY_REAL_QUEUE_ID: where a half message goes once committed.
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
#: TransactionalMessageUtil's system topics.
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"


class TransactionState(IntEnum):
    """LocalTransactionState as END_TRANSACTION's commitOrRollback (MessageSysFlag values)."""

    #: UNKNOW: no decision yet; the broker checks back later.
    UNKNOWN = 0
    COMMIT = SysFlag.TRANSACTION_COMMIT
    ROLLBACK = SysFlag.TRANSACTION_ROLLBACK


def half_message_properties(group: str, check_immunity_s: int | None = None) -> dict[str, str]:
    """The properties a producer adds to a half message (besides the message's own)."""
    return dict(_half_properties(group, check_immunity_s))


@lru_cache(maxsize=64)
def _half_properties(group: str, check_immunity_s: int | None) -> dict[str, str]:
    """half_message_properties, made and checked once per group and immunity (a sink task sends all its rows
    with the same); shared: never changed."""
    props = {PROPERTY_TRANSACTION_PREPARED: "true", PROPERTY_PRODUCER_GROUP: group}
    if check_immunity_s is not None:
        if check_immunity_s <= 0:
            raise InvalidMessageError(f"check_immunity_s must be positive, got {check_immunity_s}")
        props[PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS] = str(int(check_immunity_s))
    return props


def half_request(
    msg: Message,
    uniq_key: str,
    *,
    group: str,
    check_immunity_s: int | None = None,
    max_message_size: int,
    compress_over: int,
    namespace: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> SendRequest:
    """The SEND_MESSAGE_V2 request of a half message: the message's own request, with the prepared
    sysFlag and the half properties (after ``extra``, properties the sender adds to the message's own).
    A delayed message cannot be one (refused, not silently undelayed)."""
    if not isinstance(msg, Message):
        raise InvalidMessageError(f"expected a Message, got {type(msg).__name__}")
    if msg.delay_level:
        raise InvalidMessageError(
            f"topic {msg.topic!r}: a transactional (half) message cannot be delayed (delay_level={msg.delay_level}); "
            "send delayed rows without a transaction"
        )
    return message_request(
        msg,
        uniq_key,
        max_message_size=max_message_size,
        compress_over=compress_over,
        namespace=namespace,
        extra={**extra, **_half_properties(group, check_immunity_s)}
        if extra
        else _half_properties(group, check_immunity_s),
        sys_flag=SysFlag.TRANSACTION_PREPARED,
    )


#: The END_TRANSACTION fields that change from half to half, in the order _end_template's render takes them.
_END_SLOTS = ("tranStateTableOffset", "commitLogOffset", "msgId", "transactionId")


@lru_cache(maxsize=256)
def _end_template(
    group: str, state: TransactionState, from_check: bool, broker_name: str | None, with_transaction_id: bool
) -> ExtFieldsTemplate:
    """END_TRANSACTION's extFields for one group, decision and broker."""
    fixed = EndTransactionRequestHeader(
        producer_group=group,
        tran_state_table_offset=0,
        commit_log_offset=0,
        commit_or_rollback=state,
        msg_id="",
        transaction_id="" if with_transaction_id else None,
        from_transaction_check=from_check,
        broker_name=broker_name,
    )
    return ExtFieldsTemplate(fixed.to_fields(), _END_SLOTS if with_transaction_id else _END_SLOTS[:3])


def end_transaction_ext(
    group: str,
    state: TransactionState,
    *,
    tran_state_table_offset: int,
    commit_log_offset: int,
    msg_id: str,
    transaction_id: str | None = None,
    from_transaction_check: bool = False,
    broker_name: str | None = None,
) -> bytes:
    """END_TRANSACTION's extFields in the ROCKETMQ serialization, from the template of its group, decision
    and broker."""
    template = _end_template(group, state, from_transaction_check, broker_name, transaction_id is not None)
    if transaction_id is None:
        return template.render(tran_state_table_offset, commit_log_offset, msg_id)
    return template.render(tran_state_table_offset, commit_log_offset, msg_id, transaction_id)


def _int(cmd: RemotingCommand, name: str, what: str) -> int:
    value = cmd.field(name)
    if value is None:
        raise ProtocolError(f"{what} lacks header field {name!r}")
    try:
        return int(value)
    except ValueError:
        raise ProtocolError(f"{what} header field {name!r} is not a number: {value[:20]!r}") from None


@dataclass(frozen=True)
class EndTransactionRequestHeader:
    """EndTransactionRequestHeader (with RpcRequestHeader's bname), fields as the Java client sets them."""

    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    commit_or_rollback: TransactionState
    msg_id: str
    transaction_id: str | None = None
    from_transaction_check: bool = False
    broker_name: str | None = None

    def to_fields(self) -> dict[str, str]:
        fields = {
            "producerGroup": self.producer_group,
            "tranStateTableOffset": str(self.tran_state_table_offset),
            "commitLogOffset": str(self.commit_log_offset),
            "commitOrRollback": str(int(self.commit_or_rollback)),
            "fromTransactionCheck": "true" if self.from_transaction_check else "false",
            "msgId": self.msg_id,
        }
        if self.transaction_id is not None:
            fields["transactionId"] = self.transaction_id
        if self.broker_name is not None:
            fields["bname"] = self.broker_name
        return hashmap_ordered(fields)

    def command(self, remark: str | None = None) -> RemotingCommand:
        """The END_TRANSACTION request, in the ROCKETMQ serialization (its extFields: end_transaction_ext)."""
        ext = end_transaction_ext(
            self.producer_group,
            self.commit_or_rollback,
            tran_state_table_offset=self.tran_state_table_offset,
            commit_log_offset=self.commit_log_offset,
            msg_id=self.msg_id,
            transaction_id=self.transaction_id,
            from_transaction_check=self.from_transaction_check,
            broker_name=self.broker_name,
        )
        return RemotingCommand(
            code=RequestCode.END_TRANSACTION, remark=remark, serialize_type=SerializeType.ROCKETMQ, ext_bytes=ext
        )

    @classmethod
    def from_command(cls, cmd: RemotingCommand) -> EndTransactionRequestHeader:
        what = "END_TRANSACTION"
        raw = _int(cmd, "commitOrRollback", what)
        try:
            state = TransactionState(raw)
        except ValueError:
            raise ProtocolError(f"{what}: commitOrRollback field wrong ({raw})") from None
        group = cmd.field("producerGroup")
        msg_id = cmd.field("msgId")
        if group is None or msg_id is None:
            raise ProtocolError(f"{what} lacks producerGroup or msgId")
        return cls(
            producer_group=group,
            tran_state_table_offset=_int(cmd, "tranStateTableOffset", what),
            commit_log_offset=_int(cmd, "commitLogOffset", what),
            commit_or_rollback=state,
            msg_id=msg_id,
            transaction_id=cmd.field("transactionId"),
            from_transaction_check=java_bool(cmd.field("fromTransactionCheck")),
            broker_name=cmd.field("bname"),
        )


@dataclass(frozen=True)
class CheckTransactionStateRequestHeader:
    """What a broker asks a producer about one half message (body: the half, MessageDecoder layout)."""

    tran_state_table_offset: int
    commit_log_offset: int
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None

    def to_fields(self) -> dict[str, str]:
        fields = {
            "tranStateTableOffset": str(self.tran_state_table_offset),
            "commitLogOffset": str(self.commit_log_offset),
        }
        for name, value in (
            ("msgId", self.msg_id),
            ("transactionId", self.transaction_id),
            ("offsetMsgId", self.offset_msg_id),
        ):
            if value is not None:
                fields[name] = value
        return hashmap_ordered(fields)

    @classmethod
    def from_command(cls, cmd: RemotingCommand) -> CheckTransactionStateRequestHeader:
        what = "CHECK_TRANSACTION_STATE"
        return cls(
            tran_state_table_offset=_int(cmd, "tranStateTableOffset", what),
            commit_log_offset=_int(cmd, "commitLogOffset", what),
            msg_id=cmd.field("msgId"),
            transaction_id=cmd.field("transactionId"),
            offset_msg_id=cmd.field("offsetMsgId"),
        )


#: The brokers' defaultQueryMaxNum: how many messages a query by key answers at most.
QUERY_MAX_NUM = 32


def query_uniq_key_request(
    topic: str, uniq_key: str, begin_ms: int, end_ms: int, max_num: int = QUERY_MAX_NUM
) -> RemotingCommand:
    """QUERY_MESSAGE (code 12) for the messages of ``topic`` whose UNIQ_KEY is ``uniq_key``, stored between
    ``begin_ms`` and ``end_ms`` (the broker's index; answered QUERY_NOT_FOUND when there is none).

    A broker indexes a message's UNIQ_KEY and its KEYS alike (topic#key), so a query by key finds it. Java's
    client adds MixAll.UNIQUE_MSG_QUERY_FLAG (``_UNIQUE_KEY_QUERY=true``), whose only effect is maxNum =
    defaultQueryMaxNum; it is not sent here, as brokers disagree on signing it under ACL (4.9.8 leaves it out
    of the content it verifies, 5.x includes it for clients newer than 4.9.3), and maxNum says the same.
    """
    fields = {
        "topic": topic,
        "key": uniq_key,
        "maxNum": str(max_num),
        "beginTimestamp": str(begin_ms),
        "endTimestamp": str(end_ms),
    }
    ordered = hashmap_ordered(fields)
    return RemotingCommand(code=RequestCode.QUERY_MESSAGE, ext_fields=ordered)

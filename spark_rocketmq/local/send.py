"""What a broker does with one send request on its send thread: the checks of SendMessageProcessor,
then store the messages (or, ack-only, count them as stored) and answer SEND_OK."""

from __future__ import annotations

import dataclasses
import random
import re
import threading
from collections.abc import Mapping
from itertools import accumulate
from typing import Protocol

from ..errors import ProtocolError
from ..protocol.codes import Perm, RequestCode, ResponseCode, SysFlag
from ..protocol.command import RemotingCommand
from ..protocol.headers import SendMessageRequestHeader
from ..protocol.javamap import hashmap_order
from ..protocol.message import (
    MAX_PROPERTIES_LENGTH,
    NOT_ALLOWED_SEND_TOPICS,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    TOPIC_PATTERN,
    decode_properties,
    encode_hashmap_properties,
    is_legal_topic_name,
)
from ..protocol.registry import TopicConfig
from ..protocol.stored import (
    batch_body_spans,
    offset_msg_ids,
    split_batch_body,
    stored_record_sizes,
    uniform_batch_records,
)
from ..protocol.timer import TIMER_TOPIC
from ..protocol.transaction import HALF_TOPIC
from .faults import Faults
from .namesrv import FAQ_URL
from .schedule import SCHEDULE_TOPIC, schedule_properties
from .server import Connection, Freeze
from .stamp import trace_fields
from .store import MessageStore
from .timer import Held, Refusal, TimerConfig, recall_handle, transform_timer_message
from .transaction import half_properties, is_half

SEND_CODES = frozenset((RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE))
#: Answers a broker gives to a send it stored when the flush or the replica did not complete in
#: time; an injected one (LocalBroker.inject) stores the messages and answers with it.
STORED_NOT_OK_CODES = frozenset(
    (ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.SLAVE_NOT_AVAILABLE)
)
#: What every send answer carries besides its own fields.
_SEND_OK_ORDER = hashmap_order(["msgId", "queueId", "queueOffset", *trace_fields()])
_SEND_OK_RECALL_ORDER = hashmap_order(["msgId", "queueId", "queueOffset", "recallHandle", *trace_fields()])
_STORE_HOST = "127.0.0.1"


class SendBroker(Protocol):
    """What a send processor reads of its broker (LocalBroker is one): its settings, topics, store,
    run state and injected faults; and the count of sends answered SEND_OK, which it raises."""

    sends: int

    @property
    def name(self) -> str: ...

    @property
    def port(self) -> int: ...

    @property
    def permission(self) -> int: ...

    @property
    def max_message_size(self) -> int: ...

    @property
    def max_delay_level(self) -> int: ...

    @property
    def timer_config(self) -> TimerConfig | None:
        """None: a 4.9.8 broker, which has no timer hook."""

    @property
    def stamp(self) -> Mapping[str, str]:
        """What the broker puts into every message it stores (stamp.broker_stamp)."""

    @property
    def trace_fields(self) -> Mapping[str, str]:
        """MSG_REGION and TRACE_ON of every send answer (stamp.trace_fields)."""

    @property
    def strips_wait(self) -> bool:
        """Whether a single message's WAIT is taken out of its stored properties (4.9.8)."""

    @property
    def faults(self) -> Faults: ...

    @property
    def stopping(self) -> threading.Event: ...

    @property
    def freeze(self) -> Freeze: ...

    @property
    def store(self) -> MessageStore: ...

    def clock_ms(self) -> int: ...

    def topic(self, topic: str) -> TopicConfig | None: ...

    def topic_for_send(self, header: SendMessageRequestHeader) -> TopicConfig | None: ...


class SendProcessor:
    """Answers the send requests of one broker. Called on the broker's send thread only."""

    def __init__(self, broker: SendBroker, *, ack_only: bool = False) -> None:
        self.broker = broker
        self.ack_only = ack_only
        # ack-only: the next queue offset of each queue and the commit-log position, as if stored.
        self._next_offsets: dict[tuple[str, int], int] = {}
        self._virtual_position: int | None = None

    def process(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        broker = self.broker
        faults = broker.faults.current()
        if faults.latency_ms and (broker.stopping.wait(faults.latency_ms / 1000.0) or not broker.freeze.passage()):
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"broker {broker.name} is shutting down")
        injected = faults.take_code()
        answer_code: int = ResponseCode.SUCCESS
        if injected is not None and injected in STORED_NOT_OK_CODES:
            answer_code, injected = injected, None  # stored, then answered with the injected code
        if injected is not None:
            remark = faults.remark or f"[injected fault] {ResponseCode(injected).name} on {broker.name}"
            return cmd.response(injected, remark=remark, ext_fields=dict(broker.trace_fields))
        header = SendMessageRequestHeader.from_command(cmd)

        def refuse(code: int, remark: str) -> RemotingCommand:
            return cmd.response(code, remark=remark, ext_fields=dict(broker.trace_fields))

        if not Perm.is_writeable(broker.permission) and _is_order_topic(broker.topic(header.topic)):
            # msgCheck: a broker without write permission refuses order topics only (the NameServer
            # keeps its queues out of every route, so a client does not choose them).
            return refuse(ResponseCode.NO_PERMISSION, f"the broker[{_STORE_HOST}] sending message is forbidden")
        topic = header.topic
        if not is_legal_topic_name(topic):
            return refuse(ResponseCode.SYSTEM_ERROR, _illegal_topic_remark(topic))
        if topic in NOT_ALLOWED_SEND_TOPICS:
            return refuse(ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.")
        conf = broker.topic_for_send(header)
        if conf is None:
            return refuse(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{topic}] not exist, apply first please!\nSee {FAQ_URL} for further details.",
            )
        queue_id = header.queue_id
        if queue_id < 0:
            queue_id = random.randrange(conf.write_queue_nums)
        if queue_id >= max(conf.write_queue_nums, conf.read_queue_nums):
            return refuse(ResponseCode.SYSTEM_ERROR, _illegal_queue_remark(queue_id, conf, conn))
        props = header.properties.encode("utf-8")
        body = cmd.body  # bytes, or a view of its frame's own buffer (a large send)
        max_size = broker.max_message_size
        illegal = (
            "the message is illegal, maybe msg body or properties length not matched. msg body length limit "
            f"{max_size}B, msg properties length limit 32KB."
        )
        if len(body) > max_size or len(props) > MAX_PROPERTIES_LENGTH:
            return refuse(ResponseCode.MESSAGE_ILLEGAL, illegal)
        batch = header.batch
        try:
            level = _delay_level(header.properties)
        except ValueError as exc:  # Integer.parseInt's refusal, answered as a broker answers an exception
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
        if batch and (header.sys_flag & SysFlag.TRANSACTION_ROLLBACK or level > 0):
            # CommitLog.asyncPutMessages: a batch may be neither transactional nor delayed.
            return refuse(ResponseCode.MESSAGE_ILLEGAL, illegal)
        if not batch and not body:
            return refuse(ResponseCode.MESSAGE_ILLEGAL, "the message body is empty")
        held: Held | None = None
        tran_ok = header.sys_flag & SysFlag.TRANSACTION_ROLLBACK in (0, SysFlag.TRANSACTION_COMMIT)
        if broker.timer_config is not None and not batch and level == 0 and tran_ok:
            # A 5.x broker's put-message hook (local/timer.py); batches skip it, as a 5.x broker's do.
            timed = transform_timer_message(
                header.properties, broker.stamp, topic, queue_id, broker.clock_ms(), broker.timer_config
            )
            if isinstance(timed, Refusal):
                return refuse(timed.code, timed.remark)
            held = timed
        if not batch and is_half(header.sys_flag):
            # A half message: held in the half topic, invisible until END_TRANSACTION commits it.
            store_topic, store_queue = HALF_TOPIC, 0
            own = half_properties(header.properties, broker.stamp, topic, queue_id)
            shared = b""
            header = dataclasses.replace(header, sys_flag=header.sys_flag & ~SysFlag.TRANSACTION_ROLLBACK)
        elif held is not None:
            store_topic, store_queue, own, shared = TIMER_TOPIC, 0, held.properties, b""
        elif level > 0 and tran_ok:
            # Held in the schedule queue of its level until due (local/schedule.py).
            level = min(level, broker.max_delay_level)
            store_topic, store_queue = SCHEDULE_TOPIC, level - 1
            own = schedule_properties(header.properties, broker.stamp, topic, queue_id, level)
            shared = b""
        else:
            # A single message's properties are stored rewritten; a batch's are appended to each record's.
            store_topic, store_queue = topic, queue_id
            stored_props = stored_properties(header.properties, broker.stamp, keep_wait=batch or not broker.strips_wait)
            own, shared = (b"", stored_props) if batch else (stored_props, b"")
        try:
            if self.ack_only:
                first, positions = self._ack(store_topic, store_queue, body, own, shared, batch)
            else:
                first, positions = self._store(conn, header, store_topic, store_queue, bytes(body), own, shared, batch)
        except _EmptyBatch:
            return refuse(ResponseCode.MESSAGE_ILLEGAL, "the batch holds no message")
        except ProtocolError as exc:
            what = "the batch body is malformed" if batch else "the message is illegal"
            return refuse(ResponseCode.MESSAGE_ILLEGAL, f"{what}: {exc}")
        if answer_code == ResponseCode.SUCCESS:
            broker.sends += 1
        fields = {
            "msgId": offset_msg_ids(_STORE_HOST, broker.port, positions),
            "queueId": str(queue_id),
            "queueOffset": str(first),
            **broker.trace_fields,
        }
        order = _SEND_OK_ORDER
        uniq = decode_properties(header.properties).get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) if held else None
        if held is not None and uniq:
            fields["recallHandle"] = recall_handle(topic, broker.name, held.out_ms, uniq)
            order = _SEND_OK_RECALL_ORDER
        answer_remark = None if answer_code == ResponseCode.SUCCESS else faults.remark
        return cmd.response(answer_code, remark=answer_remark, ext_fields={k: fields[k] for k in order})

    def _store(
        self,
        conn: Connection,
        header: SendMessageRequestHeader,
        topic: str,
        queue_id: int,
        body: bytes,
        props: bytes,
        shared_props: bytes,
        batch: bool,
    ) -> tuple[int, list[int]]:
        broker = self.broker
        if batch:
            items = split_batch_body(body)
            if not items:
                raise _EmptyBatch
        else:
            items = [(header.flag, body, props)]
        return broker.store.append_messages(
            topic,
            queue_id,
            items,
            sys_flag=header.sys_flag,
            born_timestamp=header.born_timestamp,
            born_host=conn.peer,
            store_host=(_STORE_HOST, broker.port),
            reconsume_times=header.reconsume_times,
            extra_properties=shared_props,
        )

    def _ack(
        self, topic: str, queue_id: int, body: bytes | memoryview, props: bytes, shared_props: bytes, batch: bool
    ) -> tuple[int, list[int]]:
        """Everything _store checks, nothing written: queue offsets and commit-log positions advance
        by what the records would take."""
        uniform = uniform_batch_records(body) if batch else None
        if uniform is not None:  # one record size, checked for all records at once
            count, body_len, props_len = uniform
            (size,) = stored_record_sizes(topic, [(body_len, props_len)], shared_props)
            sizes: list[int] | None = None
        elif batch:
            spans = batch_body_spans(body)
            if not spans:
                raise _EmptyBatch
            sizes = stored_record_sizes(topic, [(n, p) for _flag, _start, n, p in spans], shared_props)
        else:
            sizes = stored_record_sizes(topic, [(len(body), len(props))], shared_props)
        if sizes is not None:
            count = len(sizes)
        key = (topic, queue_id)
        first = self._next_offsets.get(key)
        store = self.broker.store
        if first is None:
            first = store.next_queue_offset(topic, queue_id)
        position = self._virtual_position
        if position is None:
            position = store.commit_log_offset
        if sizes is None:  # records of one size
            positions = list(range(position, position + size * (count + 1), size))
        else:
            positions = list(accumulate(sizes, initial=position))
        self._virtual_position = positions.pop()
        self._next_offsets[key] = first + count
        return first, positions


class _EmptyBatch(Exception):
    pass


#: What Integer.parseInt reads: an optional sign and ASCII digits.
_JAVA_INT = re.compile(r"[+-]?[0-9]+")


def stored_properties(properties: str, stamp: Mapping[str, str], *, keep_wait: bool) -> bytes:
    """The properties a broker stores for a send request's: parsed into a HashMap, the broker's stamp
    put in (broker_stamp), written back in the map's order. A single message's replace its own; a 4.9.8
    broker takes WAIT out of them (SendMessageProcessor saves its 9 bytes), a 5.3.3 one keeps it. A
    batch's keep WAIT and are appended to every record's own (CommitLog's MessageExtBatchEncoder)."""
    props = decode_properties(properties)
    props.update(stamp)
    return encode_hashmap_properties(props, leave_out=None if keep_wait else PROPERTY_WAIT_STORE_MSG_OK).encode()


def _illegal_topic_remark(topic: str) -> str:
    """TopicValidator.validateTopic's remark for a topic is_legal_topic_name refuses."""
    if not topic.strip():
        return "The specified topic is blank."
    if not TOPIC_PATTERN.fullmatch(topic):
        return "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    return "The specified topic is longer than topic max length."


def _is_order_topic(conf: TopicConfig | None) -> bool:
    """TopicConfigManager.isOrderTopic: a topic this broker knows, created as an order topic."""
    return conf is not None and conf.order


def _delay_level(properties: str) -> int:
    """Message.getDelayTimeLevel of encoded properties: DELAY's value, 0 when absent; ValueError,
    worded as Java's NumberFormatException, when it is not a decimal int."""
    if PROPERTY_DELAY_TIME_LEVEL not in properties:
        return 0
    value = decode_properties(properties).get(PROPERTY_DELAY_TIME_LEVEL)
    if value is None:
        return 0
    if not _JAVA_INT.fullmatch(value) or not -(2**31) <= int(value) < 2**31:
        raise ValueError(f'java.lang.NumberFormatException: For input string: "{value}"')
    return int(value)


def _illegal_queue_remark(queue_id: int, conf: TopicConfig, conn: Connection) -> str:
    return (
        f"request queueId[{queue_id}] is illegal, TopicConfig [topicName={conf.topic_name}, "
        f"readQueueNums={conf.read_queue_nums}, writeQueueNums={conf.write_queue_nums}, "
        f"perm={_perm_string(conf.perm)}, topicFilterType=SINGLE_TAG, topicSysFlag={conf.topic_sys_flag}, "
        f"order={'true' if conf.order else 'false'}] Producer: {conn.peer_addr}"
    )


def _perm_string(perm: int) -> str:
    return ("R" if perm & Perm.READ else "-") + ("W" if perm & Perm.WRITE else "-") + ("X" if perm & 1 else "-")

"""PULL_MESSAGE as a broker answers it (PullMessageProcessor): the checks and their refusals, the store's
answer (get_message.py) as a response code with nextBeginOffset, minOffset and maxOffset, the offset a pull
commits, and long polling: a pull finding no new message is held until one arrives or its suspend time
passes (PullRequestHoldService), on a thread of its own, so that the connection serves other requests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..protocol.codes import Perm, ResponseCode
from ..protocol.command import RemotingCommand
from ..protocol.registry import TopicConfig
from .get_message import GetMessageResult, GetMessageStatus, SubscriptionParseError, TagFilter, get_message
from .offsets import ConsumerOffsets
from .server import Connection, Freeze
from .store import MessageStore

#: PullSysFlag bits.
FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4

#: FAQUrl.suggestTodo's address in each version's remarks.
FAQ_URLS = {"4": "http://rocketmq.apache.org/docs/faq/", "5": "https://rocketmq.apache.org/docs/bestPractice/06FAQ"}

_CODES = {
    GetMessageStatus.FOUND: ResponseCode.SUCCESS,
    GetMessageStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


def suggest_todo(version: str) -> str:
    """What FAQUrl.suggestTodo appends to a remark in this broker version."""
    return f"\nSee {FAQ_URLS[version[0]]} for further details."


class PullBroker(Protocol):
    """What the pull side reads of its broker (LocalBroker is one)."""

    rocketmq_version: str
    broker_id: int

    @property
    def store(self) -> MessageStore: ...

    @property
    def freeze(self) -> Freeze: ...

    def topic(self, topic: str) -> TopicConfig | None: ...


#: A group's subscriptions from its heartbeat, by topic: (expression, expression type); None for a group
#: no heartbeat named.
Subscriptions = Callable[[str], dict[str, tuple[str, str]] | None]


@dataclass
class _Held:
    conn: Connection
    cmd: RemotingCommand
    topic: str
    queue_id: int
    offset: int
    deadline: float
    #: The queue's max offset when the pull was last looked at: it is looked at again once the queue grows.
    seen: int


class PullProcessor:
    """The PULL_MESSAGE handler of one broker, and its held pulls."""

    def __init__(
        self, broker: PullBroker, offsets: Callable[[], ConsumerOffsets], subscriptions: Subscriptions
    ) -> None:
        self.broker = broker
        self._offsets = offsets
        self._subscriptions = subscriptions
        self._held: list[_Held] = []
        self._held_lock = threading.Lock()
        self._stop = threading.Event()

    def start(self) -> None:
        self._stop = stop = threading.Event()
        store = self.broker.store
        threading.Thread(target=self._hold_loop, args=(store, stop), name="pull-hold", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        with self._held_lock:
            self._held.clear()

    def handle(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        return self._process(conn, cmd, allow_suspend=True)

    def _process(self, conn: Connection, cmd: RemotingCommand, allow_suspend: bool) -> RemotingCommand | None:
        broker = self.broker
        version = broker.rocketmq_version
        if broker.broker_id != 0 and not version.startswith("4."):  # rejectRequest(): slaveReadEnable=false
            return cmd.response(
                ResponseCode.SYSTEM_BUSY, remark="[REJECTREQUEST]system busy, start flow control for a while"
            )
        group = cmd.require("consumerGroup")
        topic = cmd.require("topic")
        queue_id = cmd.int_field("queueId")
        offset = cmd.int_field("queueOffset")
        max_nums = cmd.int_field("maxMsgNums")
        sys_flag = cmd.int_field("sysFlag")
        self._offsets().add_group(group)
        config = broker.topic(topic)
        if config is None:
            remark = f"topic[{topic}] not exist, apply first please! {suggest_todo(version)}"
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, remark=remark)
        if not config.perm & Perm.READ:
            return cmd.response(ResponseCode.NO_PERMISSION, remark=f"the topic[{topic}] pulling message is forbidden")
        if not 0 <= queue_id < config.read_queue_nums:
            code = ResponseCode.SYSTEM_ERROR if version.startswith("4.") else ResponseCode.INVALID_PARAMETER
            remark = (
                f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{config.read_queue_nums}]"
                f" consumer:[/{conn.peer_addr}]"
            )
            return cmd.response(code, remark=remark)
        if sys_flag & FLAG_SUBSCRIPTION:
            expression, expression_type = cmd.field("subscription"), cmd.field("expressionType")
        else:
            subscriptions = self._subscriptions(group)
            subscribed = subscriptions.get(topic) if subscriptions is not None else None
            if subscribed is None:
                what = "group info" if subscriptions is None else "subscription"
                remark = f"the consumer's {what} not exist{suggest_todo(version)}"
                return cmd.response(ResponseCode.SUBSCRIPTION_NOT_EXIST, remark=remark)
            expression, expression_type = subscribed
        try:
            if expression_type not in (None, "", "TAG"):
                if not expression:
                    raise SubscriptionParseError(expression)
                remark = f"The broker does not support consumer to filter message by {expression_type}"
                return cmd.response(ResponseCode.SYSTEM_ERROR, remark=remark)
            tag_filter = TagFilter.parse(expression)
        except SubscriptionParseError:
            return cmd.response(
                ResponseCode.SUBSCRIPTION_PARSE_FAILED, remark="parse the consumer's subscription failed"
            )
        master = broker.broker_id == 0
        result = get_message(broker.store, topic, queue_id, offset, max_nums, tag_filter, master)
        answer = self._answer(cmd, result, offset, master, config)
        if allow_suspend and sys_flag & FLAG_COMMIT_OFFSET and master:
            self._offsets().commit(group, topic, queue_id, int(cmd.field("commitOffset") or 0))
        if allow_suspend and answer.code == ResponseCode.PULL_NOT_FOUND and sys_flag & FLAG_SUSPEND:
            suspend_ms = int(cmd.field("suspendTimeoutMillis") or 0)
            deadline = time.monotonic() + suspend_ms / 1000.0
            held = _Held(conn, cmd, topic, queue_id, offset, deadline, result.max_offset)
            with self._held_lock:
                self._held.append(held)
            with broker.store.new_message:
                broker.store.new_message.notify_all()  # the hold thread learns its new deadline
            return None
        return answer

    def _answer(
        self, cmd: RemotingCommand, result: GetMessageResult, offset: int, master: bool, config: TopicConfig
    ) -> RemotingCommand:
        status = result.status
        if status == GetMessageStatus.NO_MESSAGE_IN_QUEUE:
            code = ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
        else:
            code = _CODES[status]
        if code == ResponseCode.PULL_OFFSET_MOVED and not master:
            code = ResponseCode.PULL_RETRY_IMMEDIATELY  # a slave does not correct offsets (offsetCheckInSlave)
        fields = {
            "suggestWhichBrokerId": "0",
            "nextBeginOffset": str(result.next_begin_offset),
            "minOffset": str(result.min_offset),
            "maxOffset": str(result.max_offset),
        }
        if not self.broker.rocketmq_version.startswith("4."):
            fields |= {"topicSysFlag": str(config.topic_sys_flag), "groupSysFlag": "0"}
        return cmd.response(code, remark=status.value, ext_fields=fields, body=b"".join(result.records))

    # -- long polling ------------------------------------------------------------------------------
    def _hold_loop(self, store: MessageStore, stop: threading.Event) -> None:
        freeze = self.broker.freeze
        while not stop.is_set() and freeze.passage():
            with self._held_lock:
                held = list(self._held)
            now = time.monotonic()
            wait = min((h.deadline for h in held), default=now + 1.0) - now
            with store.new_message:
                if wait > 0 and not self._ready(store, held):
                    store.new_message.wait(min(wait, 1.0))
            if stop.is_set():
                return
            self._wake(store, time.monotonic())

    @staticmethod
    def _ready(store: MessageStore, held: list[_Held]) -> bool:
        """Whether a held pull's queue has grown since it was looked at (under the store's lock: reads no record)."""
        return any(store.max_offset(h.topic, h.queue_id) > h.seen for h in held)

    def _wake(self, store: MessageStore, now: float) -> None:
        """Answer each held pull whose queue has a matching new message, or whose time is up, as the broker
        does when it wakes them: the pull again, not held this time."""
        with self._held_lock:
            held, self._held = self._held, []
        keep: list[_Held] = []
        for h in held:
            if h.conn.closed:
                continue
            timed_out = now >= h.deadline
            max_offset = store.max_offset(h.topic, h.queue_id)
            if not timed_out and max_offset <= h.seen:
                keep.append(h)
                continue
            answer = self._process(h.conn, h.cmd, allow_suspend=False)
            if not timed_out and answer is not None and answer.code == ResponseCode.PULL_RETRY_IMMEDIATELY:
                h.seen = max_offset  # what arrived does not match the subscription: held on
                keep.append(h)
                continue
            if answer is not None:
                try:
                    h.conn.send(answer)
                except OSError:
                    h.conn.close()
        if keep:
            with self._held_lock:
                self._held.extend(keep)

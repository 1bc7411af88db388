"""A broker's send queue: the one send thread, fed by a bounded queue, that BrokerFastFailure cleans.

As a 4.9.8 broker does it: reader threads enqueue SEND_MESSAGE / SEND_MESSAGE_V2 /
SEND_BATCH_MESSAGE requests with their arrival time (RequestTask.createTimestamp); one thread
processes them in arrival order and writes each answer on the request's connection; a request
arriving at a full queue is answered SYSTEM_BUSY "[OVERLOAD]..." at once
(NettyRemotingAbstract, RejectedExecutionException); and every 10 ms a cleaner takes from the
head of the queue every request that has waited `wait_time_mills_in_send_queue` or longer and
answers it SYSTEM_BUSY "[TIMEOUT_CLEAN_QUEUE]..." (BrokerFastFailure.cleanExpiredRequestInQueue).

Differences from Java: the cleaner starts with the queue rather than one second after the broker,
and only runs while the queue holds something; there is one send thread whatever the cores
(4.9.8's sendMessageThreadPoolNums defaults to min(cores, 4), its commit-log lock serialises the
appends anyway); and answers are written by the thread that made them, so a client that stops
reading its answers eventually holds that thread (Netty would buffer them).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import NamedTuple

from ..protocol.codes import ResponseCode
from ..protocol.command import RemotingCommand
from .server import Connection, Freeze, Handler, answer_request

log = logging.getLogger(__name__)

#: BrokerConfig.sendThreadPoolQueueCapacity
DEFAULT_SEND_QUEUE_CAPACITY = 10000
#: BrokerConfig.waitTimeMillsInSendQueue
DEFAULT_WAIT_TIME_MILLS_IN_SEND_QUEUE = 200
#: BrokerFastFailure runs cleanExpiredRequest at this fixed rate.
CLEAN_INTERVAL_S = 0.010

OVERLOAD_REMARK = "[OVERLOAD]system busy, start flow control for a while"
_TIMEOUT_CLEAN_QUEUE = (
    "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: {}ms, size of queue: {}"
)


def timeout_clean_queue_remark(behind_ms: int, queue_size: int) -> str:
    """The remark of a request BrokerFastFailure took out of the send queue."""
    return _TIMEOUT_CLEAN_QUEUE.format(behind_ms, queue_size)


class SendTask(NamedTuple):
    conn: Connection
    cmd: RemotingCommand
    #: time.monotonic() when the request was read.
    arrived: float


class SendQueue:
    """The bounded queue, its send thread and its cleaner; `process` answers one request."""

    def __init__(
        self,
        name: str,
        process: Handler,
        freeze: Freeze,
        *,
        capacity: int = DEFAULT_SEND_QUEUE_CAPACITY,
        wait_time_mills: int | None = DEFAULT_WAIT_TIME_MILLS_IN_SEND_QUEUE,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"send queue capacity must be at least 1, not {capacity}")
        self.name = name
        self.capacity = capacity
        #: 0 or None: nothing is ever cleaned from the queue.
        self.wait_time_mills = wait_time_mills or 0
        self._process = process
        self._freeze = freeze
        self._tasks: deque[SendTask] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._stopped = False
        self._threads: list[threading.Thread] = []

    def __len__(self) -> int:
        return len(self._tasks)

    def start(self) -> SendQueue:
        self._threads = [threading.Thread(target=self._work, name=f"{self.name}-send", daemon=True)]
        if self.wait_time_mills > 0:
            self._threads.append(threading.Thread(target=self._clean, name=f"{self.name}-fastfail", daemon=True))
        for t in self._threads:
            t.start()
        return self

    def submit(self, conn: Connection, cmd: RemotingCommand) -> bool:
        """Queue a request; False when the queue is full (answer it OVERLOAD)."""
        task = SendTask(conn, cmd, time.monotonic())
        with self._cond:
            tasks = self._tasks
            if len(tasks) >= self.capacity or self._stopped:
                return False
            tasks.append(task)
            if len(tasks) == 1:
                self._cond.notify_all()  # the send thread and the cleaner wait for a first request
        return True

    def stop(self) -> None:
        """Stop both threads; requests still queued stay unanswered (their connections close)."""
        with self._cond:
            self._stopped = True
            self._tasks.clear()
            self._cond.notify_all()

    def join(self, timeout: float) -> None:
        """Wait (at most `timeout` s in all) for the threads to end after stop()."""
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    # -- the send thread -----------------------------------------------------------------------
    def _work(self) -> None:
        freeze = self._freeze
        cond = self._cond
        tasks = self._tasks
        process = self._process
        while freeze.passage():
            with cond:
                while not tasks and not self._stopped:
                    cond.wait()
                if self._stopped:
                    return
                conn, cmd, _arrived = tasks.popleft()
            if not freeze.passage():  # frozen between taking the request and running it
                return
            answer = answer_request(process, conn, cmd)
            if answer is not None and not cmd.is_oneway:
                _write(conn, answer)

    # -- BrokerFastFailure ---------------------------------------------------------------------
    def _clean(self) -> None:
        freeze = self._freeze
        cond = self._cond
        tasks = self._tasks
        limit = self.wait_time_mills
        while True:
            with cond:
                while not tasks and not self._stopped:
                    cond.wait()
                if self._stopped:
                    return
                cond.wait(CLEAN_INTERVAL_S)  # a notify (stop, a refilled queue) only brings it forward
                if self._stopped:
                    return
            if not freeze.passage():
                return
            expired: list[tuple[SendTask, str]] = []
            with cond:
                now = time.monotonic()
                while tasks:
                    behind = int((now - tasks[0].arrived) * 1000)
                    if behind < limit:
                        break
                    task = tasks.popleft()
                    expired.append((task, timeout_clean_queue_remark(behind, len(tasks))))
            for task, remark in expired:
                # RequestTask.returnResponse answers even a oneway request.
                _write(task.conn, task.cmd.response(ResponseCode.SYSTEM_BUSY, remark=remark))


def _write(conn: Connection, answer: RemotingCommand) -> None:
    try:
        conn.send(answer)
    except OSError as exc:
        log.debug("%s: answer to %s lost: %s", conn.server.name, conn.peer_addr, exc)
        conn.close()

"""NameServer client: topic routes, with failover to the next NameServer when one fails.

Until one NameServer has answered, NameServers that all fail are a configuration error
(ClusterConfigError naming each address and what it said), not an outage to wait out.
"""

from __future__ import annotations

import logging
import random
import threading
import time

from ..errors import BrokerError, RemotingError
from ..protocol.codes import ResponseCode
from ..protocol.headers import route_request
from ..protocol.registry import cluster_info_request, registered_broker_names
from ..protocol.route import TopicRouteData
from .diagnosis import namesrv_unreachable
from .remoting import RemotingClient

log = logging.getLogger(__name__)

#: A broker registers with its NameServers every registerNameServerPeriod (30 s by default, at most 60 s):
#: a NameServer that answers again after an outage may not know every broker's topics for that long.
REGISTRATION_PERIOD_MAX_S = 60.0


class NameServerClient:
    """Asks one NameServer at a time; moves to the next one in the list when it fails."""

    def __init__(self, remoting: RemotingClient, addrs: list[str], timeout_ms: int) -> None:
        if not addrs:
            raise ValueError("at least one NameServer address is needed")
        self._remoting = remoting
        self.addrs = list(addrs)
        self._timeout_ms = timeout_ms
        # Like the Java client: start at a random NameServer, stay with it until it fails.
        self._index = random.randrange(len(self.addrs))
        self._lock = threading.Lock()
        #: Whether any NameServer has answered this client yet.
        self.answered = False
        #: NameServers whose failure was logged and that have not answered since (one line per outage).
        self._failing: set[str] = set()
        #: When each NameServer first answered after its last outage (time.monotonic()).
        self._back_at: dict[str, float] = {}

    @property
    def current(self) -> str:
        return self.addrs[self._index % len(self.addrs)]

    def use(self, addr: str) -> None:
        """Ask ``addr`` (one of the list) first from now on, as after a failover to it."""
        with self._lock:
            self._index = self.addrs.index(addr)

    def get_route(self, topic: str) -> TopicRouteData | None:
        """The topic's route, or None when the NameServer says TOPIC_NOT_EXIST.

        Raises RemotingError when no NameServer answers, BrokerError for another error answer.
        """
        failures: list[tuple[str, RemotingError]] = []
        start = self._index
        for i in range(len(self.addrs)):
            idx = (start + i) % len(self.addrs)
            addr = self.addrs[idx]
            try:
                resp = self._remoting.invoke_sync(addr, route_request(topic), self._timeout_ms)
            except RemotingError as exc:
                if addr not in self._failing:
                    self._failing.add(addr)
                    more = "; trying the next one" if len(self.addrs) > 1 else ""
                    log.warning("NameServer %s failed (%s)%s; not logged again until it answers", addr, exc, more)
                self._remoting.close_connection(addr)
                failures.append((addr, exc))
                continue
            with self._lock:
                self._index = idx
                self.answered = True
                if addr in self._failing:
                    self._failing.discard(addr)
                    self._back_at[addr] = time.monotonic()
                    log.info("NameServer %s answers again", addr)
            if resp.code == ResponseCode.SUCCESS:
                if not resp.body:
                    return None
                return TopicRouteData.from_json(bytes(resp.body))  # the same object: a decoded body is bytes
            if resp.code == ResponseCode.TOPIC_NOT_EXIST:
                return None
            raise BrokerError(resp.code, resp.remark, addr, request=f"GET_ROUTEINFO_BY_TOPIC {topic}")
        if not self.answered:
            raise namesrv_unreachable(";".join(self.addrs), failures)
        last = failures[-1][1]
        raise RemotingError(
            f"no NameServer of {';'.join(self.addrs)} answered the route query for {topic!r}: {last}", last.addr
        )

    def back_for(self) -> float | None:
        """Seconds since the current NameServer answered again after an outage this client saw, while
        that is within REGISTRATION_PERIOD_MAX_S (its brokers may not all have registered again); else None."""
        back_at = self._back_at.get(self.current)
        if back_at is None:
            return None
        back_for = time.monotonic() - back_at
        return back_for if back_for < REGISTRATION_PERIOD_MAX_S else None

    def registered_brokers(self) -> list[str]:
        """The names of the brokers registered with the current NameServer (GET_BROKER_CLUSTER_INFO).

        Raises RemotingError when it does not answer, BrokerError for an error answer.
        """
        addr = self.current
        resp = self._remoting.invoke_sync(addr, cluster_info_request(), self._timeout_ms)
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError(resp.code, resp.remark, addr, request="GET_BROKER_CLUSTER_INFO")
        return registered_broker_names(bytes(resp.body or b"{}"))

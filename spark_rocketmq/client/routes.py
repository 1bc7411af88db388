"""The route table of a producer (MQClientInstance's share of it): topic routes from the NameServers,
the TBW102 stand-in for topics to auto-create, heartbeats to every routed broker, and a background
thread that refreshes both and closes connections no route names any more.

Unlike Java's client, which learns a new route only at its next poll (30 s by default), a broker that
fails a request (its connection refused or lost, no answer, "not leader" answers) has the routes asked
for again at once, and every ROUTE_FOLLOW_GAP_S while failures go on: when a DLedger group or the
controller elects a new master, it registers under the same brokerName with another address, and the
sends follow it within a route lookup of its registration. Listeners hear of every brokerName whose
master address changed (the sender forgets the old master's fault mark).
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace

from ..errors import NoBrokerRegisteredError, RemotingConnectError, TopicNotFoundError, TopicNotWritableError
from ..protocol.codes import ResponseCode
from ..protocol.command import RemotingCommand
from ..protocol.headers import CLIENT_INNER_PRODUCER_GROUP, heartbeat_request, unregister_client_request
from ..protocol.route import MessageQueue, TopicPublishInfo, TopicRouteData, publish_info
from .config import ProducerConfig
from .namesrv import NameServerClient
from .remoting import RemotingClient

log = logging.getLogger(__name__)

#: After a broker's failure, the routes are asked for again at most this often (while failures go on).
ROUTE_FOLLOW_GAP_S = 0.5

#: Called with (brokerName, old master address or None, new master address or None) when a refreshed route
#: names another master for a brokerName (an election, a restarted broker with another address, none left).
MasterChanged = Callable[[str, str | None, str | None], None]


@dataclass
class TopicRoute:
    """What the producer knows of one topic: its publish info and its round-robin counter (sendWhichQueue)."""

    info: TopicPublishInfo
    counter: itertools.count[int]


class RouteTable:
    """Topic routes by wire topic, fetched on first use and refreshed every poll_name_server_interval_ms."""

    def __init__(
        self,
        config: ProducerConfig,
        remoting: RemotingClient,
        *,
        client_id: str,
        groups: tuple[str, ...],
        unwrap: Callable[[str], str],
    ) -> None:
        self._config = config
        self._remoting = remoting
        self.namesrv = NameServerClient(remoting, config.namesrv_addrs, config.remoting_timeout_ms)
        self._client_id = client_id
        #: The producer groups the heartbeats register this client with (ProducerManager): brokers ask
        #: check-backs of a group's halves only of its registered producers.
        self._groups = list(groups)
        self._unwrap = unwrap
        self._topics: dict[str, TopicRoute] = {}
        self._lock = threading.Lock()
        self._fetching: dict[str, threading.Lock] = {}
        self._brokers_greeted: set[str] = set()
        #: Each broker's version (MQClientInstance.brokerVersionTable), from the header of its answers.
        self._broker_versions: dict[str, int] = {}
        self._stop = threading.Event()
        #: Set to ask the service thread for an early refresh (follow_failure).
        self._follow = threading.Event()
        self._master_listeners: list[MasterChanged] = []
        #: Topics whose last refresh failed (logged once until one works).
        self._refresh_failing: set[str] = set()
        self._service = threading.Thread(target=self._service_loop, name="rocketmq-route-service", daemon=True)
        self._service.start()

    # -- routes ------------------------------------------------------------------------------------
    def _lookup(self, wire_topic: str) -> TopicRouteData | None:
        """The topic's route, else one made from TBW102's (default_topic_queue_nums queues per broker), else None."""
        route = self.namesrv.get_route(wire_topic)
        if route is not None:
            return route
        default = self.namesrv.get_route(self._config.create_topic_key)
        if default is None:
            return None
        n = self._config.default_topic_queue_nums
        return TopicRouteData(
            queue_datas=[
                replace(qd, read_queue_nums=min(n, qd.read_queue_nums), write_queue_nums=min(n, qd.read_queue_nums))
                for qd in default.queue_datas
            ],
            broker_datas=default.broker_datas,
            filter_server_table=default.filter_server_table,
        )

    def _fetch(self, wire_topic: str) -> TopicRoute:
        route = self._lookup(wire_topic)
        if route is None:
            if not self.namesrv.registered_brokers():
                raise NoBrokerRegisteredError(
                    f"NameServer {self.namesrv.current} knows no broker yet, so no route of topic "
                    f"{self._unwrap(wire_topic)!r}: a restarted NameServer learns its brokers when they "
                    "register again (every 30 s); check that the brokers run with this namesrvAddr",
                    self.namesrv.current,
                )
            # A broker registers its topics and itself at once: one that registered since the lookups above
            # is in this second one.
            route = self._lookup(wire_topic)
        if route is None:
            back_for = self.namesrv.back_for()
            if back_for is not None:
                raise NoBrokerRegisteredError(
                    f"NameServer {self.namesrv.current} answers again since {back_for:.0f} s after an outage and "
                    f"knows no route of topic {self._unwrap(wire_topic)!r} yet: the brokers that have it may not "
                    "have registered again (every 30 s)",
                    self.namesrv.current,
                )
            raise TopicNotFoundError(
                self._unwrap(wire_topic),
                f"NameServer {self.namesrv.current} knows neither it nor {self._config.create_topic_key}",
            )
        info = publish_info(wire_topic, route)
        if not info.ok:
            raise TopicNotWritableError(
                self._unwrap(wire_topic), "its route has no writable queue on a broker with a master"
            )
        return TopicRoute(info, itertools.count(random.randrange(1 << 16)))

    def cached(self, wire_topic: str) -> TopicRoute | None:
        """The topic's route if this table holds it (never asks the NameServer)."""
        return self._topics.get(wire_topic)

    def get(self, wire_topic: str) -> TopicRoute:
        """The topic's route, asking the NameServer on first use (this blocks for that request)."""
        route = self._topics.get(wire_topic)
        if route is not None:
            return route
        with self._lock:  # one lookup per topic at a time; lookups of other topics do not wait for it
            fetching = self._fetching.setdefault(wire_topic, threading.Lock())
        with fetching:
            route = self._topics.get(wire_topic)
            if route is None:
                route = self._fetch(wire_topic)  # bounded by remoting_timeout_ms per NameServer
                self._topics[wire_topic] = route
        self.heartbeat_new_brokers()
        return route

    def refresh(self) -> None:
        """Fetch every cached topic's route again; close connections to brokers no route names."""
        for wire_topic, old in list(self._topics.items()):
            try:
                new = self._fetch(wire_topic)
            except Exception as exc:
                # once per topic until a refresh of it works again (during an election: every 0.5 s)
                if wire_topic not in self._refresh_failing:
                    self._refresh_failing.add(wire_topic)
                    log.warning("route refresh of %s failed: %s; kept its last route", self._unwrap(wire_topic), exc)
                continue
            self._refresh_failing.discard(wire_topic)
            if new.info.message_queues != old.info.message_queues or new.info.route != old.info.route:
                log.info("route of %s changed: %s", self._unwrap(wire_topic), new.info.broker_names)
                self._topics[wire_topic] = TopicRoute(new.info, old.counter)
                self._tell_master_changes(old.info.route, new.info.route)
        self.heartbeat_new_brokers()
        keep = set(self.broker_addrs()) | set(self.namesrv.addrs)
        for addr in self._remoting.retain(keep):
            log.info("closed the connection to %s: no route names it any more", addr)
        self._brokers_greeted &= keep
        for addr in [a for a in self._broker_versions if a not in keep]:
            self._broker_versions.pop(addr, None)

    def on_master_changed(self, listener: MasterChanged) -> None:
        """Call ``listener`` (on the route thread) for each brokerName whose master address a refresh changed."""
        self._master_listeners.append(listener)

    def _tell_master_changes(self, old: TopicRouteData, new: TopicRouteData) -> None:
        before = {bd.broker_name: bd.master_addr for bd in old.broker_datas}
        for bd in new.broker_datas:
            if bd.broker_name in before and before[bd.broker_name] != bd.master_addr:
                log.info("broker %s: master %s -> %s", bd.broker_name, before[bd.broker_name], bd.master_addr)
                for listener in self._master_listeners:
                    listener(bd.broker_name, before[bd.broker_name], bd.master_addr)

    def follow_failure(self) -> None:
        """A broker failed a request: have the routes refreshed now, or ROUTE_FOLLOW_GAP_S after the last
        early refresh (any thread; never blocks)."""
        self._follow.set()

    def publish_queues(self, wire_topic: str) -> list[MessageQueue]:
        return list(self.get(wire_topic).info.message_queues)

    def broker_addr(self, route: TopicRoute, broker_name: str, topic: str) -> str:
        addr = route.info.route.broker_addr(broker_name)
        if addr is None:
            raise RemotingConnectError(f"broker {broker_name!r} has no master address in the route of topic {topic!r}")
        return addr

    def broker_addrs(self) -> list[str]:
        addrs: dict[str, None] = {}
        for route in list(self._topics.values()):
            for bd in route.info.route.broker_datas:
                if bd.master_addr:
                    addrs[bd.master_addr] = None
        return list(addrs)

    # -- broker versions ------------------------------------------------------------------------------
    def broker_version(self, addr: str) -> int | None:
        """The version the broker at ``addr`` wrote in its last answer; None before any answer."""
        return self._broker_versions.get(addr)

    def note_version(self, addr: str, version: int) -> None:
        self._broker_versions[addr] = version

    def learn_version(
        self, addr: str, timeout_ms: float, done: Callable[[int | None, BaseException | None], None]
    ) -> None:
        """Ask the broker at ``addr`` for its version (a HEART_BEAT, whose answer carries it); ``done(version,
        None)`` or ``done(None, error)`` runs once, on a reader thread or here."""

        def answered(answer: RemotingCommand | None, error: BaseException | None) -> None:
            if answer is None:
                done(None, error or RemotingConnectError(f"no answer from {addr}", addr))
                return
            self.note_version(addr, answer.version)
            done(answer.version, None)

        self._remoting.invoke_with_callback(
            addr, heartbeat_request(self._client_id, self._groups), timeout_ms, answered
        )

    # -- heartbeats (sendHeartbeatToAllBroker) --------------------------------------------------------
    def _heartbeat(self, addr: str) -> None:
        cmd = heartbeat_request(self._client_id, self._groups)
        fut = self._remoting.invoke_async(addr, cmd, self._config.remoting_timeout_ms)

        def done(f: Future[RemotingCommand]) -> None:
            exc = f.exception()
            if exc is not None:
                log.debug("HEART_BEAT to %s failed: %s", addr, exc)
                return
            resp = f.result()
            self.note_version(addr, resp.version)
            if resp.code != ResponseCode.SUCCESS:
                log.warning("HEART_BEAT refused by %s: code %s %s", addr, resp.code, resp.remark)

        fut.add_done_callback(done)

    def heartbeat_new_brokers(self) -> None:
        for addr in self.broker_addrs():
            if addr not in self._brokers_greeted:
                self._brokers_greeted.add(addr)
                self._heartbeat(addr)

    def send_heartbeat_to_all_brokers(self) -> None:
        for addr in self.broker_addrs():
            self._brokers_greeted.add(addr)
            self._heartbeat(addr)

    def unregister(self, deadline: float) -> None:
        """UNREGISTER_CLIENT to every routed broker, for the group and the inner group, until deadline."""
        futures = []
        for addr in self.broker_addrs():
            for group in (*self._groups, CLIENT_INNER_PRODUCER_GROUP):
                left_ms = (deadline - time.monotonic()) * 1000
                if left_ms <= 0:
                    break
                cmd = unregister_client_request(self._client_id, group)
                futures.append((addr, self._remoting.invoke_async(addr, cmd, min(left_ms, 1000))))
        for addr, fut in futures:
            try:  # best effort: the broker forgets silent clients anyway
                fut.result(timeout=max(0.0, deadline - time.monotonic()))
            except Exception as exc:
                log.debug("UNREGISTER_CLIENT to %s failed: %s", addr, exc)

    # -- background ----------------------------------------------------------------------------------
    def _service_loop(self) -> None:
        poll = self._config.poll_name_server_interval_ms / 1000.0
        beat = self._config.heartbeat_broker_interval_ms / 1000.0
        next_poll = time.monotonic() + poll
        next_beat = time.monotonic() + beat
        refreshed_at = -ROUTE_FOLLOW_GAP_S
        while not self._stop.is_set():
            self._follow.wait(max(0.0, min(next_poll, next_beat) - time.monotonic()))
            if self._stop.is_set():
                return
            if self._follow.is_set():  # a broker failed: refresh now, or once the gap since the last is over
                self._follow.clear()
                next_poll = min(next_poll, refreshed_at + ROUTE_FOLLOW_GAP_S)
            now = time.monotonic()
            try:
                if now >= next_poll:
                    refreshed_at = now
                    next_poll = now + poll
                    self.refresh()
                if now >= next_beat:
                    next_beat = now + beat
                    self.send_heartbeat_to_all_brokers()
            except Exception:
                log.exception("producer background task failed")

    def close(self, join_s: float = 1.0) -> None:
        """Stop the background thread; waits at most ``join_s`` for it (it may be in a NameServer request)."""
        self._stop.set()
        self._follow.set()
        if self._service is not threading.current_thread():
            self._service.join(timeout=join_s)

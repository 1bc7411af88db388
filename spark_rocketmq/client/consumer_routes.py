"""The topic routes of a PullConsumer: cached by wire topic, asked for again when older than the poll interval,
and at once (at most every ROUTE_FOLLOW_GAP_S) after a request on the topic failed, so a new master or a
replica serving reads is found (MQClientInstance's route table, without its timer thread)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import RemotingError, TopicNotFoundError
from ..protocol.route import BrokerData, TopicRouteData
from .namesrv import NameServerClient
from .routes import ROUTE_FOLLOW_GAP_S

log = logging.getLogger("spark_rocketmq.client.pull_consumer")


@dataclass
class _Route:
    route: TopicRouteData
    fetched_at: float
    #: A request on it failed: ask the NameServer again before the next call.
    stale: bool = False


class ConsumerRoutes:
    """Routes by wire topic (thread-safe); ``unwrap`` names a wire topic as the user knows it."""

    def __init__(self, namesrv: NameServerClient, poll_interval_ms: int, unwrap: Callable[[str], str]) -> None:
        self._namesrv = namesrv
        self._poll_s = poll_interval_ms / 1000.0
        self._unwrap = unwrap
        self._routes: dict[str, _Route] = {}
        self._lock = threading.Lock()
        self._fetching: dict[str, threading.Lock] = {}

    def get(self, wire_topic: str, *, refresh: bool = False) -> TopicRouteData:
        """The topic's route: cached, asked for again when stale (after ROUTE_FOLLOW_GAP_S), older than
        poll_name_server_interval_ms, or ``refresh``. A failed refresh keeps the last route."""
        known = self._routes.get(wire_topic)
        now = time.monotonic()
        if known is not None and not refresh:
            age = now - known.fetched_at
            if age < self._poll_s and not (known.stale and age >= ROUTE_FOLLOW_GAP_S):
                return known.route
        with self._lock:
            fetching = self._fetching.setdefault(wire_topic, threading.Lock())
        with fetching:
            latest = self._routes.get(wire_topic)
            if latest is not None and latest is not known and not latest.stale:
                return latest.route  # another thread fetched it meanwhile
            try:
                route = self._namesrv.get_route(wire_topic)
            except RemotingError as exc:
                if latest is None:
                    raise
                log.warning("route of %s could not be refreshed (%s); kept the last one", wire_topic, exc)
                latest.fetched_at = time.monotonic()
                return latest.route
            if route is None:
                self._routes.pop(wire_topic, None)
                raise TopicNotFoundError(
                    self._unwrap(wire_topic), f"NameServer {self._namesrv.current} has no route of it"
                )
            if latest is not None and latest.route != route:
                log.info("route of %s changed: %s", wire_topic, route.broker_datas)
            self._routes[wire_topic] = _Route(route, time.monotonic())
            return route

    def follow(self, wire_topic: str) -> None:
        """A request on this topic failed: ask for its route before the next call."""
        known = self._routes.get(wire_topic)
        if known is not None:
            known.stale = True


def broker_data(route: TopicRouteData, broker_name: str) -> BrokerData | None:
    for data in route.broker_datas:
        if data.broker_name == broker_name:
            return data
    return None

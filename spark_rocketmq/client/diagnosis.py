"""Telling a misconfigured cluster from a sick one, and saying what to fix.

A producer that has never had an answer from a NameServer, or never stored a message, and cannot
reach any NameServer, or any broker of a route, is pointed at the wrong place: no retry until
delivery_timeout_ms will cure it. Such sends fail with a ClusterConfigError that names each address,
what the system (or the peer) said, and the fix. Once a cluster has worked, the same failures are an
outage and keep today's rules (retries, then the sink's delivery deadline).

Broker refusals no retry cures either get their fix named: ACL keys missing or refused, a request
over the broker's maxMessageSize, a half message to a broker that refuses transactional messages, and a
5.x Proxy's message type check (a topic whose ``message.type`` is not the message's, or no topic at all).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence

from ..errors import BrokerError, CannotConnectError, ClusterConfigError, RemotingError
from ..protocol.codes import ResponseCode
from ..protocol.route import TopicRouteData

#: What a 4.x/5.x broker says about a body over its maxMessageSize ("msg body length limit 4194304B").
_BODY_LIMIT = re.compile(r"msg body length limit (\d+)B")
#: What a 5.x broker's MessageExtEncoder throws for a batch over its maxMessageSize (answered SYSTEM_ERROR).
_BATCH_TOO_LARGE = "message body size exceeded"
#: What a 4.x/5.x broker with rejectTransactionMessage=true answers a half message (NO_PERMISSION).
_TRANSACTIONS_FORBIDDEN = "sending transaction message is forbidden"
#: What a 5.x Proxy answers (MESSAGE_ILLEGAL) a message whose type is not its topic's ``message.type``
#: attribute (enableTopicMessageTypeCheck, on by default); UNSPECIFIED is a topic it does not know.
_TYPE_MISMATCH = re.compile(r"TopicMessageType validate failed, the expected type is (\w+), but actual type is (\w+)")
#: What the peer's closing says when it never answered: a broker enforcing TLS does that to plain text.
_TLS_HINT = (
    "a broker or NameServer that enforces TLS (tls.server.mode=enforcing) closes plain-text connections "
    "like this: set use_tls=true"
)


def _said(exc: RemotingError) -> str:
    return exc.os_error if isinstance(exc, CannotConnectError) else str(exc)


def namesrv_unreachable(namesrv_addr: str, failures: Sequence[tuple[str, RemotingError]]) -> ClusterConfigError:
    """No NameServer has ever answered this producer and every one failed now."""
    each = "; ".join(f"{addr}: {_said(exc)}" for addr, exc in failures)
    hint = f" ({_TLS_HINT})" if any("before any answer" in _said(e) for _, e in failures) else ""
    return ClusterConfigError(
        f"no NameServer of namesrv_addr={namesrv_addr} has ever answered this producer: {each}{hint}. "
        "Check namesrv_addr (host:port of each NameServer, port 9876 by default, ';' between them), that the "
        "NameServers run (mqnamesrv) and that the Spark executors reach them (nc -vz HOST PORT on an executor host)"
    )


class Reachability:
    """What one producer knows of its brokers: whether one ever stored a message, and which ones could not
    be connected to since they last answered (broker name -> (advertised address, the error))."""

    def __init__(self) -> None:
        self.stored = False
        self._lock = threading.Lock()
        self._unreachable: dict[str, tuple[str, CannotConnectError]] = {}

    def answered(self, broker: str) -> None:
        if broker in self._unreachable:
            with self._lock:
                self._unreachable.pop(broker, None)

    def cannot_connect(self, broker: str, exc: CannotConnectError) -> None:
        with self._lock:
            self._unreachable[broker] = (exc.addr or "?", exc)

    def brokers_unreachable(self, topic: str, route: TopicRouteData) -> ClusterConfigError | None:
        """The error for a route none of whose brokers could be connected to, while nothing was ever
        stored; None once a message was stored, or while a broker of the route is untried or answered."""
        if self.stored:
            return None
        names = [bd.broker_name for bd in route.broker_datas if bd.master_addr]
        with self._lock:
            failed = [(name, *self._unreachable[name]) for name in names if name in self._unreachable]
        if not names or len(failed) < len(names):
            return None
        each = "; ".join(
            f"{name} at {addr} (the address the NameServer advertises): {exc.os_error}" for name, addr, exc in failed
        )
        tls = any("before any answer" in exc.os_error for _, _, exc in failed)
        fix = (
            _TLS_HINT
            if tls
            else "the NameServer answered, so the brokers advertise an address the Spark executors cannot reach: "
            "set brokerIP1 in each broker's broker.conf to an address the executors reach (not a container's or "
            "another network's), restart the brokers, and check with mqadmin clusterList -n NAMESRV and "
            "nc -vz HOST PORT on an executor host"
        )
        return ClusterConfigError(
            f"no broker of topic {topic!r} could be connected to, and this producer has not stored a message "
            f"yet: {each}. Fix: {fix}"
        )


def explain_refusal(
    exc: BrokerError, broker: str | None, request_bytes: int, max_message_size: int, topic: str | None = None
) -> ClusterConfigError | None:
    """A broker answer that tells of a configuration mismatch, as a ClusterConfigError naming the fix; None
    for any other answer."""
    where = f"broker {broker} at {exc.addr}" if broker else f"broker {exc.addr}"
    remark = exc.remark or ""
    mismatch = _TYPE_MISMATCH.search(remark) if exc.code == ResponseCode.MESSAGE_ILLEGAL else None
    if mismatch:
        return _type_refusal(exc.addr or "?", topic or "TOPIC", mismatch.group(1), mismatch.group(2))
    if "AclException" in remark:
        said = remark.split("AclException:", 1)[-1].split(", org.apache", 1)[0].strip()
        if "No accessKey" in said:
            fix = "the broker has aclEnable=true: set access_key and secret_key to an account of its plain_acl.yml"
        elif "signature" in said:
            fix = "secret_key is not the one the broker's plain_acl.yml gives this access_key: correct it"
        else:
            fix = (
                "the account may not publish to this topic: give it PUB in topicPerms (or defaultTopicPerm) in "
                "the broker's plain_acl.yml, or use an account that may"
            )
        return ClusterConfigError(f"{where} refused the send for ACL ({said}): {fix}")
    if exc.code == ResponseCode.NO_PERMISSION:
        acl2 = _acl2_refusal(where, remark)
        if acl2 is not None:
            return acl2
    limit = _BODY_LIMIT.search(remark) if exc.code == ResponseCode.MESSAGE_ILLEGAL else None
    if limit and request_bytes > int(limit.group(1)):
        broker_max = int(limit.group(1))
        return ClusterConfigError(
            f"{where} refused a request of {request_bytes} bytes: its maxMessageSize is {broker_max} bytes, "
            f"this producer's max_message_size {max_message_size}. Set max_message_size (and, for the sink, "
            f"max_request_bytes) to at most {broker_max}, or raise maxMessageSize on every broker"
        )
    if exc.code == ResponseCode.NO_PERMISSION and _TRANSACTIONS_FORBIDDEN in remark:
        return ClusterConfigError(
            f"{where} refused a half message ({remark}): it runs with rejectTransactionMessage=true. Set "
            "rejectTransactionMessage=false in the broker.conf of every broker of the topic and restart them, or "
            "publish with delivery_guarantee=at_least_once"
        )
    if _BATCH_TOO_LARGE in remark:  # a 5.x broker's answer to a batch over its maxMessageSize (SYSTEM_ERROR)
        return ClusterConfigError(
            f"{where} refused a batch request of {request_bytes} bytes ({_BATCH_TOO_LARGE}): its maxMessageSize is "
            f"smaller, this producer's max_message_size {max_message_size}. Set max_message_size (and, for the "
            "sink, max_request_bytes) to at most the brokers' maxMessageSize, or raise it on every broker"
        )
    return None


def _type_refusal(addr: str, topic: str, expected: str, actual: str) -> ClusterConfigError:
    """A Proxy's type check refusal: the topic, its type, the message's, and the mqadmin command that fixes it."""
    create = (
        f"mqadmin updateTopic -n NAMESRV -c CLUSTER -t {topic} -r 8 -w 8 -a +message.type={actual}"
        " (NAMESRV the NameServer behind the Proxy, CLUSTER its brokers' cluster)"
    )
    said = f"the expected type is {expected}, but actual type is {actual}"
    if expected == "UNSPECIFIED":
        return ClusterConfigError(
            f"the RocketMQ Proxy at {addr} refused a {actual} message to topic {topic!r} ({said}): the topic does "
            f"not exist, and a Proxy never creates one. Create it: {create}"
        )
    return ClusterConfigError(
        f"the RocketMQ Proxy at {addr} refused a {actual} message to topic {topic!r} ({said}): the topic's "
        f"message.type is {expected} and a Proxy takes only messages of that type. Publish to a topic of type "
        f"{actual}, or give this one that type: {create} (MIXED takes every type). Or turn the Proxy's check off: "
        '"enableTopicMessageTypeCheck": false in its rmq-proxy.json'
    )


#: What a 5.x broker with ACL 2.0 (authenticationEnabled / authorizationEnabled) answers, NO_PERMISSION (16)
#: with the AuthenticationException's or AuthorizationException's text: (pattern, the fix).
_ACL2_REFUSALS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"username cannot be null"),
        "the broker has authenticationEnabled=true (ACL 2.0): set access_key and secret_key to a user of the "
        "broker (mqadmin listUser -b BROKER lists them; mqadmin createUser -b BROKER -u NAME -p SECRET makes one)",
    ),
    (
        re.compile(r"check signature failed"),
        "secret_key is not the password the broker's user of this access_key has: correct it (mqadmin "
        "updateUser -b BROKER -u NAME -p SECRET sets it)",
    ),
    (
        re.compile(r"User:(?P<user>\S+) is not found"),
        "the broker has no user {user}: create it (mqadmin createUser -b BROKER -u {user} -p SECRET) and grant it "
        "the topic (mqadmin createAcl -b BROKER -s User:{user} -r Topic:TOPIC -a Pub -d Allow), or use a user "
        "the broker has",
    ),
    (
        re.compile(r"User:(?P<user>\S+) is disabled"),
        "the broker's user {user} is disabled: enable it (mqadmin updateUser -b BROKER -u {user} -s enable) or use "
        "another user",
    ),
    (
        re.compile(r"(?P<subject>User:\S+) has no permission to access (?P<resource>\S+) from \S+, (?P<why>.*)$"),
        "{subject} may not publish to {resource}: grant it (mqadmin createAcl -b BROKER -s {subject} "
        "-r {resource} -a Pub -d Allow; a Deny policy on it or on a pattern covering it, mqadmin listAcl -b BROKER "
        "shows them, wins over an Allow), or use a user that may",
    ),
)


def _acl2_refusal(where: str, remark: str) -> ClusterConfigError | None:
    """An ACL 2.0 refusal (5.x) as a ClusterConfigError naming the account, the resource and the fix."""
    for pattern, fix in _ACL2_REFUSALS:
        found = pattern.search(remark)
        if found:
            said = remark.strip().rstrip(".")
            return ClusterConfigError(f"{where} refused the send for ACL ({said}): {fix.format(**found.groupdict())}")
    return None

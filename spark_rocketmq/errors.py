"""One error hierarchy for the whole package.

Every message says what was wrong, where (topic, broker, row, option) and what to do about it.
"""

from __future__ import annotations


class RocketMQError(Exception):
    """Base of every error this package raises on purpose."""


class ConfigError(RocketMQError, ValueError):
    """An option has a value that cannot work; the message names the option."""


class ClusterConfigError(ConfigError):
    """The cluster, as this configuration reaches it, cannot take a send, and no retry will change that:
    no NameServer ever answered, no broker of a route could ever be connected to, a broker requires ACL
    keys, a broker refuses a request size. The message names each address, what it said, and the fix.
    Never resent: the sink fails the batch with it at once instead of waiting for delivery_timeout_ms."""


class SchemaError(ConfigError):
    """A DataFrame's columns cannot be published: the message names the column, the type found,
    the types accepted and the fix. Raised on the driver before any task runs."""


class InvalidMessageError(RocketMQError, ValueError):
    """A message that must not be sent: bad topic, body, property or delay level.

    Raised before anything goes on the wire.
    """


class ProtocolError(RocketMQError, ValueError):
    """Bytes that are not a valid RocketMQ remoting frame, header or body.

    A transport that meets one closes the connection it came from.
    """


class RemotingError(RocketMQError):
    """The conversation with a NameServer or broker failed (connect, send, receive)."""

    def __init__(self, message: str, addr: str | None = None) -> None:
        super().__init__(message)
        self.addr = addr


class RemotingConnectError(RemotingError):
    """A connection could not be opened or was lost."""


class CannotConnectError(RemotingConnectError):
    """No conversation could be started with addr: the TCP connect was refused or timed out, the TLS
    handshake failed, or the peer closed the connection before answering anything (as a broker that
    enforces TLS does with a plain-text client). ``os_error`` is what the system or the peer said."""

    def __init__(self, message: str, addr: str | None = None, os_error: str = "") -> None:
        super().__init__(message, addr)
        self.os_error = os_error or message


class NoBrokerRegisteredError(RemotingError):
    """A NameServer answered but cannot know the route yet: it knows no broker (it was restarted and the
    brokers have not registered again, which they do every 30 s, or none runs with its address), or it
    answers again after an outage this producer saw and the topic's brokers may not have registered since.
    Retried like a lost connection."""


class RemotingTimeoutError(RemotingError):
    """No answer within the request's timeout."""


class RemotingTooMuchRequestError(RemotingError):
    """Too many requests in flight; the caller should slow down."""


class TopicNotFoundError(RocketMQError):
    """No NameServer knows a route for the topic and auto-creation did not apply."""

    def __init__(self, topic: str, detail: str = "") -> None:
        msg = (
            f"No route info of topic {topic!r}: create it on the brokers "
            f"(mqadmin updateTopic -t {topic} ...) or enable autoCreateTopicEnable on the brokers"
        )
        if detail:
            msg += f" ({detail})"
        super().__init__(msg)
        self.topic = topic


class TopicNotWritableError(TopicNotFoundError):
    """The topic's route has no writable queue (every broker read-only, as during a rolling restart, or
    the topic itself read-only): for a producer, no route, as in the Java client; it may pass."""


class BrokerError(RocketMQError):
    """A broker or NameServer answered with an error code."""

    def __init__(self, code: int, remark: str | None, addr: str | None, request: str = "") -> None:
        what = f"{request} " if request else ""
        super().__init__(f"{what}refused by {addr or '?'} with code {code}: {remark or '(no remark)'}")
        self.code = code
        self.remark = remark
        self.addr = addr


class IndexBehindError(RocketMQError):
    """A broker's message index has not reached a commit-log offset yet: a query by key that finds nothing
    cannot tell that nothing is stored up to there. Ask again later."""


class NotReplicatedError(RocketMQError):
    """A broker stored a request but answered FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE
    while retry_another_broker_when_not_store_ok asks for SEND_OK: the request is sent again."""


class SendFailedError(RocketMQError):
    """A send failed after every retry the configuration allows; carries the last cause."""

    def __init__(self, message: str, attempts: int, last_error: BaseException | None = None) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.last_error = last_error


class DeliveryError(RocketMQError):
    """Some rows of a Spark batch could not be delivered; the batch must be replayed."""


class ClusterConfigDeliveryError(DeliveryError, ClusterConfigError):
    """A Spark batch's rows were not delivered because of a ClusterConfigError on its executors: the
    message leads with that error (each address, what it said, the fix); replaying will not help
    until the configuration or the cluster is fixed."""


class InvalidRowError(InvalidMessageError):
    """Rows of a Spark batch are not valid messages and on_invalid_row is "fail"; names the rows."""


class BrokerVersionError(RocketMQError):
    """A broker cannot do what a message asks (a 4.x broker and a timer message: it would store the
    message at once); names the broker, its version and what to do. Never retried."""


class SendForbiddenError(InvalidMessageError):
    """A check-forbidden hook (Producer.register_check_forbidden_hook) refused a send before it left;
    names the hook, the topic and the hook's reason. Nothing was written; never retried."""


class InvalidPullError(RocketMQError, ValueError):
    """A pull or offset request that must not be sent (a negative offset, no message count, an expression
    type brokers do not know); raised before anything goes on the wire."""


class InvalidSubscriptionError(ConfigError):
    """A broker could not parse a pull's subscription expression (SUBSCRIPTION_PARSE_FAILED): the message
    names the expression, its type and the broker. No retry changes that answer."""

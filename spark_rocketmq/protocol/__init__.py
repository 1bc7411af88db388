"""RocketMQ remoting protocol: bytes <-> objects, no I/O, no clock, no globals."""

from .codes import (
    BROKER_BUSY_CODES,
    MQ_VERSION_V4_9_4,
    MQ_VERSION_V4_9_8,
    RETRY_ANOTHER_BROKER_CODES,
    SEND_OK_CODES,
    LanguageCode,
    Perm,
    RequestCode,
    ResponseCode,
    SerializeType,
    SysFlag,
)
from .command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from .frame import FrameDecoder, decode_frame
from .message import Message, decode_properties, encode_properties
from .route import MessageQueue, TopicPublishInfo, TopicRouteData, publish_info

__all__ = [
    "BROKER_BUSY_CODES",
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "MQ_VERSION_V4_9_4",
    "MQ_VERSION_V4_9_8",
    "RETRY_ANOTHER_BROKER_CODES",
    "SEND_OK_CODES",
    "FrameDecoder",
    "LanguageCode",
    "Message",
    "MessageQueue",
    "Perm",
    "RemotingCommand",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "SysFlag",
    "TopicPublishInfo",
    "TopicRouteData",
    "decode_frame",
    "decode_properties",
    "encode_properties",
    "publish_info",
]

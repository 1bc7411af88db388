"""A local RocketMQ for development and tests: NameServers and brokers speaking the real protocol.

Never imported by the client or Spark layers; users point the sink at their own cluster.
"""

from .broker import LocalBroker
from .cluster import LocalCluster
from .faults import Faults
from .namesrv import LocalNameServer
from .proxy import LocalProxy
from .send import STORED_NOT_OK_CODES
from .store import LocalMessage, read_store

__all__ = [
    "STORED_NOT_OK_CODES",
    "Faults",
    "LocalBroker",
    "LocalCluster",
    "LocalMessage",
    "LocalNameServer",
    "LocalProxy",
    "read_store",
]

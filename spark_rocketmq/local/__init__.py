"""A local RocketMQ for development and tests: NameServers and brokers speaking the real protocol.

Never imported by the client or Spark layers; users point the sink at their own cluster.
"""

from .broker import LocalBroker
from .cluster import LocalCluster
from .namesrv import LocalNameServer
from .store import LocalMessage, read_store

__all__ = ["LocalBroker", "LocalCluster", "LocalMessage", "LocalNameServer", "read_store"]

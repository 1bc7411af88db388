"""Pull consumers of one executor Python process, per configuration: the read side's client pool
(spark/pool.py), with the same leases and idle expiry as the sink's producers."""

from __future__ import annotations

import os

from ..client.consumer_config import ConsumerConfig
from ..client.pull_consumer import PullConsumer
from .pool import REAPER_INTERVAL_S, ClientPool

_consumer_pool: ClientPool[ConsumerConfig, PullConsumer] = ClientPool(PullConsumer, reaper_interval_s=REAPER_INTERVAL_S)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_consumer_pool._forget_after_fork)


def consumer_pool() -> ClientPool[ConsumerConfig, PullConsumer]:
    """This process's pull consumers, one per configuration."""
    return _consumer_pool

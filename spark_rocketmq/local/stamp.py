"""What a broker's SendMessageProcessor puts into the properties of every message it stores."""

from __future__ import annotations

from collections.abc import Mapping

from ..protocol.message import (
    PROPERTY_CLUSTER,
    PROPERTY_MSG_REGION,
    PROPERTY_TRACE_SWITCH,
    PROPERTY_WAIT_STORE_MSG_OK,
)

#: BrokerConfig.regionId's default.
DEFAULT_REGION = "DefaultRegion"


def trace_fields(trace_on: bool = True) -> dict[str, str]:
    """MSG_REGION (BrokerConfig.regionId) and TRACE_ON (BrokerConfig.traceOn): what every send answer
    carries in its extFields, and a 5.x broker stores in each message."""
    return {PROPERTY_TRACE_SWITCH: "true" if trace_on else "false", PROPERTY_MSG_REGION: DEFAULT_REGION}


def broker_stamp(cluster: str, rocketmq_version: str, trace_on: bool = True) -> dict[str, str]:
    """CLUSTER; a 5.x broker also MSG_REGION and TRACE_ON (trace_fields), as the real 5.3.3 stores them
    (read back by the Java consumer)."""
    stamp = {PROPERTY_CLUSTER: cluster}
    if not rocketmq_version.startswith("4."):
        stamp |= {PROPERTY_MSG_REGION: DEFAULT_REGION, PROPERTY_TRACE_SWITCH: "true" if trace_on else "false"}
    return stamp


def put_stamp(props: dict[str, str], stamp: Mapping[str, str]) -> dict[str, str]:
    """The broker's properties put in, then WAIT taken out and put back (its place in the map's order
    when names share a bucket), as SendMessageProcessor leaves them; `props` is changed and returned."""
    props.update(stamp)
    wait = props.pop(PROPERTY_WAIT_STORE_MSG_OK, None)
    if wait is not None:
        props[PROPERTY_WAIT_STORE_MSG_OK] = wait
    return props

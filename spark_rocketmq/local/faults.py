"""Faults a test injects into a local broker's sends (LocalBroker.inject): latency, an answer code,
for a number or a fraction of the sends, then other faults."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass
class Faults:
    """What a test asked a broker to do wrong."""

    latency_ms: float = 0.0
    code: int | None = None
    times: int | None = None
    fraction: float | None = None
    remark: str | None = None
    #: What follows once `times` sends had these faults (a fault, then another).
    then: Faults | None = None

    def current(self) -> Faults:
        """The faults in force: these, or once their `times` are used up, the ones that follow."""
        faults = self
        while faults.then is not None and faults.times is not None and faults.times <= 0:
            faults = faults.then
        return faults

    def take_code(self) -> int | None:
        """The code to answer this send with, if any; counts the send against `times`."""
        if self.times is not None:
            if self.times <= 0:
                return None
            self.times -= 1
            return self.code
        if self.code is None:
            return None
        if self.fraction is not None:
            return self.code if random.random() < self.fraction else None
        return self.code

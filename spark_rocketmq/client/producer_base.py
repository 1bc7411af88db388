"""What Producer's mixins (stored_calls.py, batch_sends.py) take from Producer itself: the attributes its
``__init__`` sets and its send entry point, declared once for the type checker (no code runs here)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..protocol.requests import SendRequest
    from ..protocol.route import MessageQueue
    from .config import ProducerConfig
    from .identity import UniqIdGenerator
    from .results import SendResult

__all__ = ["ProducerBase"]


class ProducerBase:
    """The base of Producer's mixins: ``config``, the UNIQ_KEY generator, ``_check_open`` and ``_submit``."""

    config: ProducerConfig
    _ids: UniqIdGenerator

    if TYPE_CHECKING:  # Producer's methods

        def _check_open(self) -> None: ...

        def _submit(
            self,
            req: SendRequest,
            queue: MessageQueue | None,
            sharding_key: str | None,
            *,
            sync: bool,
            settle_as: Callable[[SendResult], Any] | None = None,
        ) -> Future[Any]: ...

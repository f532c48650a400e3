"""When to try a failed model request again: decided by the classified error, bounded twice.

A :class:`RetryPolicy` never looks at HTTP statuses or exception types itself. It asks the
:class:`~engine.llm.errors.ProviderError` the classifier produced: ``retryable`` (rate limits other
than a spent quota, server errors, timeouts, connection failures) and ``retry_after`` (what the
provider asked for in ``Retry-After`` / ``retry-after-ms``). An overflow, a bad request, a failed
login or an unreadable body is final. Attempts are bounded by ``retries``, and the whole call,
waits included, by ``deadline`` when one is set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import ProviderError

__all__ = ["NO_RETRY", "RetryPolicy"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``retries`` extra attempts after the first; before retry ``n`` wait ``retry_after`` when the
    provider named one, else ``backoff × n`` seconds. A provider asking for more than ``max_wait``
    seconds ends the call with its error (retrying sooner than asked would only spend an attempt).
    ``deadline`` (seconds, ``None``: none) bounds the whole call: the attempt in flight is abandoned
    when it passes, and no wait is begun that would end after it."""

    retries: int = 0
    backoff: float = 0.5
    max_wait: float = 30.0
    deadline: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise ValueError(f"retries must be a whole number >= 0, got {self.retries!r}")
        for name in ("backoff", "max_wait"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.deadline is not None and not (math.isfinite(self.deadline) and self.deadline > 0):
            raise ValueError(f"deadline must be a positive number of seconds or None, got {self.deadline!r}")

    def with_retries(self, retries: int) -> "RetryPolicy":
        """The same policy with another retry count (a per-call override such as ``summary_retries``)."""
        return RetryPolicy(retries, self.backoff, self.max_wait, self.deadline)

    def wait_before_retry(self, error: ProviderError, attempt: int, elapsed: float) -> float | None:
        """Seconds to wait before the next attempt after attempt number ``attempt`` (1-based) failed
        with ``error`` at ``elapsed`` seconds into the call, or ``None``: give up with ``error``."""
        if not error.retryable or attempt > self.retries:
            return None
        if error.retry_after is not None:
            if error.retry_after > self.max_wait:
                return None
            wait = error.retry_after
        else:
            wait = self.backoff * attempt
        if self.deadline is not None and elapsed + wait >= self.deadline:
            return None
        return wait


#: one attempt, no retry: the harness default (the agent loop decides what a failure means)
NO_RETRY = RetryPolicy()

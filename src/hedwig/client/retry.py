"""Retry as a policy object: exponential backoff with jitter and a deadline, sleep injected."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from hedwig.clock import Clock, SystemClock


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    # First wait, then doubled per attempt up to max_delay_s; full jitter spreads reconnecting
    # clients so 100k of them do not hit the new owner in the same millisecond.
    initial_delay_s: float = 0.02
    # Kept short: during a failover the wait between attempts adds directly to the outage.
    max_delay_s: float = 0.5
    # Give up after this long in total (a failover takes about the ZooKeeper session timeout).
    deadline_s: float = 30.0
    rng: random.Random = field(default_factory=random.Random, compare=False)

    def with_deadline(self, deadline_s: float) -> RetryPolicy:
        return replace(self, deadline_s=deadline_s)

    def delay(self, attempt: int) -> float:
        cap = min(self.max_delay_s, self.initial_delay_s * (2.0 ** min(attempt, 20)))
        return cap / 2 + self.rng.random() * cap / 2


class Backoff:
    """One retry sequence: ``await backoff.wait()`` between attempts; False once out of time."""

    def __init__(self, policy: RetryPolicy, clock: Clock | None = None) -> None:
        self._policy = policy
        self._clock = clock or SystemClock()
        self._start = self._clock.monotonic()
        self.attempt = 0

    @property
    def elapsed(self) -> float:
        return self._clock.monotonic() - self._start

    @property
    def expired(self) -> bool:
        return self._clock.monotonic() - self._start >= self._policy.deadline_s

    async def wait(self) -> bool:
        if self.expired:
            return False
        remaining = self._policy.deadline_s - (self._clock.monotonic() - self._start)
        await self._clock.sleep(max(0.0, min(self._policy.delay(self.attempt), remaining)))
        self.attempt += 1
        return True

"""The Redis channel layer, with its per-channel receive locks made safe to cancel.

channels_redis counts each waiter for a channel's cleanup lock before it waits and uncounts it
only on release. A waiter cancelled while it waits (a socket closing while its consumer reads)
is never uncounted, so the lock outlives every holder and stays bound to the event loop it last
waited on. In a process that runs more than one event loop over its life (a worker or a command
that sends from ``async_to_sync``, the test suite) the next contended acquire in another loop
then fails with "Lock ... is bound to a different event loop", and every socket of that process
fails with it. Here a cancelled waiter is uncounted, so a released lock with nobody waiting is
dropped, as channels_redis intends.
"""

from __future__ import annotations

from channels_redis.core import ChannelLock
from channels_redis.core import RedisChannelLayer as _RedisChannelLayer


class CancelSafeChannelLock(ChannelLock):  # type: ignore[misc]
    """channels_redis's ChannelLock, uncounting a waiter that is cancelled before it holds."""

    async def acquire(self, channel: str) -> bool:
        self.wait_counts[channel] += 1
        try:
            return bool(await self.locks[channel].acquire())
        except BaseException:
            self._uncount(channel)
            raise

    def _uncount(self, channel: str) -> None:
        self.wait_counts[channel] -= 1
        if self.wait_counts[channel] < 1:
            lock = self.locks.get(channel)
            if lock is None or not lock.locked():
                self.locks.pop(channel, None)
                self.wait_counts.pop(channel, None)


class RedisChannelLayer(_RedisChannelLayer):  # type: ignore[misc]
    """The layer Lattice configures when Redis is there (settings ``CHANNEL_LAYERS``)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.receive_clean_locks = CancelSafeChannelLock()


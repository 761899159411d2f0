"""Rate-limited scoring for reward functions that call a metered API (LLM judges): a token bucket and a manager.

:class:`AsyncTokenBucket` paces coroutines to an average rate with bursts up to its capacity; a request may cost
several tokens (e.g. an estimate of an API call's token usage). :class:`RateLimitedRewardManager` stacks three limits
shared by every instance of the class in the process: concurrent calls (``reward.max_concurrent``), requests per
minute (``reward.max_rpm``) and tokens per minute (``reward.max_tpm`` with ``reward.estimated_tokens_per_request``),
and bounds each call by ``reward.timeout`` seconds. A call that times out or raises scores 0 and says so in its
extra info (``timeout`` / ``error``) instead of failing the batch.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from verl.base_config import BaseConfig, check
from verl.experimental.reward_loop.reward_manager.base import RawRewardFn, split_score
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
from verl.experimental.reward_loop.reward_manager.registry import register
from verl.protocol import DataProto

__all__ = ["AsyncTokenBucket", "RateLimitConfig", "RateLimitedRewardManager"]

logger = logging.getLogger(__name__)


@dataclass
class RateLimitConfig(BaseConfig):
    """verl's ``reward.*`` options of the ``rate_limited`` manager (``max_rpm``/``max_tpm``: null for no limit;
    ``timeout``: seconds per call). Read from the ``reward`` group by
    :func:`verl.trainer.ppo.reward.reward_settings`."""

    max_concurrent: int = 1
    max_rpm: float | None = None
    max_tpm: float | None = None
    estimated_tokens_per_request: float = 2000
    timeout: float = 300.0

    def __post_init__(self) -> None:
        check(self.max_concurrent >= 1, "max_concurrent", f"must be >= 1, got {self.max_concurrent}")


class AsyncTokenBucket:
    """Token bucket for asyncio: ``rate_limit`` tokens per second flow into a bucket of ``max_tokens`` (default:
    one second's worth), which starts full.

    ``await acquire(n)`` takes ``n`` tokens, sleeping until they have flowed in. A request larger than the bucket is
    let through once the bucket is full and leaves it in debt, so it waits as long as its size implies instead of
    forever.
    """

    def __init__(self, rate_limit: float, max_tokens: float | None = None) -> None:
        if rate_limit <= 0:
            raise ValueError(f"AsyncTokenBucket: rate_limit must be > 0 tokens/s, got {rate_limit}")
        self.rate_limit = float(rate_limit)
        self.max_tokens = float(max_tokens or rate_limit)
        self.tokens = self.max_tokens
        self.last_update: float | None = None
        self.lock = asyncio.Lock()

    def _refill(self, now: float) -> None:
        if self.last_update is not None:
            self.tokens = min(self.max_tokens, self.tokens + (now - self.last_update) * self.rate_limit)
        self.last_update = now

    async def acquire(self, num_tokens: float = 1.0) -> None:
        """Take ``num_tokens``, waiting for them if the bucket holds fewer."""
        oversized = num_tokens > self.max_tokens
        while True:
            async with self.lock:
                self._refill(asyncio.get_running_loop().time())
                if oversized:
                    wait = max(num_tokens - self.tokens, 0.0) / self.rate_limit
                    self.tokens -= num_tokens  # goes into debt; later requests wait for it to be repaid
                elif self.tokens >= num_tokens:
                    self.tokens -= num_tokens
                    return
                else:
                    wait = (num_tokens - self.tokens) / self.rate_limit
            if oversized:
                if wait > 0:
                    await asyncio.sleep(wait)
                return
            await asyncio.sleep(wait)


@register("rate_limited")
class RateLimitedRewardManager(NaiveRewardManager):
    """The naive manager behind concurrency, request-rate and token-rate limits (see the module docstring).

    The limiters are class state: the first instance in a process fixes them, and a later instance asking for other
    limits is warned about and gets the existing ones (several managers in one process must share one API quota).
    """

    _semaphore: asyncio.Semaphore | None = None
    _max_concurrent: int | None = None
    _rpm_limiter: AsyncTokenBucket | None = None
    _max_rpm: float | None = None
    _tpm_limiter: AsyncTokenBucket | None = None
    _max_tpm: float | None = None
    _estimated_tokens_per_request: float = 2000

    @classmethod
    def init_class(cls, config: Any, tokenizer: Any) -> None:
        from verl.trainer.ppo.reward import RewardSettings, reward_settings

        limits = (config if isinstance(config, RewardSettings) else reward_settings(config)).rate_limit
        max_rpm, max_tpm = limits.max_rpm, limits.max_tpm
        if cls.__dict__.get("_class_initialized", False):
            if (max_rpm, max_tpm) != (cls._max_rpm, cls._max_tpm):
                logger.warning(
                    "%s: the rate limits are shared by the whole process and were already set to max_rpm=%s, "
                    "max_tpm=%s; the new reward.max_rpm=%s / reward.max_tpm=%s are ignored",
                    cls.__name__,
                    cls._max_rpm,
                    cls._max_tpm,
                    max_rpm,
                    max_tpm,
                )
            return
        cls._max_concurrent = limits.max_concurrent
        cls._semaphore = asyncio.Semaphore(cls._max_concurrent)
        cls._max_rpm, cls._max_tpm = max_rpm, max_tpm
        cls._rpm_limiter = None if max_rpm is None else AsyncTokenBucket(max_rpm / 60.0, max_rpm / 60.0)
        cls._tpm_limiter = None if max_tpm is None else AsyncTokenBucket(max_tpm / 60.0, max_tpm / 60.0)
        cls._estimated_tokens_per_request = float(limits.estimated_tokens_per_request)
        logger.info(
            "%s: max_concurrent=%d, max_rpm=%s, max_tpm=%s (shared by the process)",
            cls.__name__,
            cls._max_concurrent,
            max_rpm,
            max_tpm,
        )
        cls._class_initialized = True

    def __init__(
        self,
        config: Any,
        tokenizer: Any,
        compute_score: RawRewardFn = None,
        reward_router_address: str | None = None,
        reward_model_tokenizer: Any = None,
        **legacy_kwargs: Any,
    ) -> None:
        # legacy_kwargs: num_examine / reward_fn_key of the batch-manager constructor, accepted and unused as in verl
        if tokenizer is None:
            raise TypeError("RateLimitedRewardManager needs a tokenizer")
        super().__init__(config, tokenizer, compute_score, reward_router_address, reward_model_tokenizer)
        self.timeout = float(self.settings.rate_limit.timeout)

    async def run_single(self, data: DataProto) -> dict[str, Any]:
        sample = await self.read_sample(data)
        if self._rpm_limiter is not None:
            await self._rpm_limiter.acquire(1.0)
        if self._tpm_limiter is not None:
            await self._tpm_limiter.acquire(self._estimated_tokens_per_request)
        async with self._semaphore:
            try:
                result = await asyncio.wait_for(
                    self.call_compute_score(sample, **self.router_kwargs()), timeout=self.timeout
                )
                score, extra = split_score(result)
            except asyncio.TimeoutError:
                logger.warning("reward function timed out after %gs (data_source=%s)", self.timeout, sample.data_source)
                score, extra = 0.0, {"timeout": True, "acc": 0.0}
            except Exception as err:  # a failing API call must not take the batch down
                logger.error(
                    "reward function failed (data_source=%s): %s: %s", sample.data_source, type(err).__name__, err
                )
                score, extra = 0.0, {"error": f"{type(err).__name__}: {err}", "acc": 0.0}
        return {"reward_score": score, "reward_extra_info": extra}

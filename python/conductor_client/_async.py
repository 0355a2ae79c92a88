"""AsyncConductorClient: the ConductorClient methods as coroutines."""

import asyncio
import functools
from concurrent.futures import Executor
from typing import Any, Callable, Dict, Iterable, Optional, Tuple, TypeVar

from ._client import ConductorClient, Refusal

T = TypeVar("T")


class AsyncConductorClient:
    """ConductorClient for asyncio gateways: every method is a coroutine.

    Calls run the thread-safe blocking client in an executor (the loop's
    default one, or the executor given), so the event loop never blocks on
    the network and many calls can be in flight at once, each on its own
    pooled keep-alive connection. register() raises ValueError like
    ConductorClient.register(), and sets last_error and logs refusals as it
    does. Use ``async with`` to close on exit.
    """

    def __init__(self, executor: Optional[Executor] = None) -> None:
        self._client = ConductorClient()
        self._executor = executor
        self._last_error: Optional[Refusal] = None

    @property
    def last_error(self) -> Optional[Refusal]:
        """Why the latest register() of this client to finish did not return
        OK (a Refusal, as ConductorClient.last_error); None after one that
        returned OK or raised ValueError, and before any."""
        return self._last_error

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    async def __aenter__(self) -> "AsyncConductorClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def setup(self, conductor_addr: str, connect_timeout_ms: int = 1000, request_timeout_ms: int = 3000) -> int:
        return await self._run(self._client.setup, conductor_addr, connect_timeout_ms, request_timeout_ms)

    async def close(self) -> int:
        return await self._run(self._client.close)

    async def health_check(self) -> int:
        return await self._run(self._client.health_check)

    async def query(
        self,
        model_name: str,
        *,
        lora_name: str = "",
        block_size: int,
        tenant_id: str = "default",
        token_ids: Iterable[int],
        cache_salt: str = "",
        instance_filter: str = "",
    ) -> Dict[str, Any]:
        return await self._run(
            self._client.query,
            model_name,
            lora_name=lora_name,
            block_size=block_size,
            tenant_id=tenant_id,
            token_ids=token_ids,
            cache_salt=cache_salt,
            instance_filter=instance_filter,
        )

    async def register(self, config: Dict[str, Any]) -> int:
        try:
            ret, self._last_error = await self._run(self._register, config)
        except ValueError:
            self._last_error = None
            raise
        return ret

    def _register(self, config: Dict[str, Any]) -> Tuple[int, Optional[Refusal]]:
        # last_error is per thread: read it on the executor thread that ran
        # the call.
        ret = self._client.register(config)
        return ret, self._client.last_error

    async def unregister(self, instance_id: str, tenant_id: str = "default", dp_rank: int = 0) -> int:
        return await self._run(self._client.unregister, instance_id, tenant_id, dp_rank)

    async def get_global_view(self) -> Dict[str, Any]:
        return await self._run(self._client.get_global_view)

    async def list_services(self) -> Dict[str, Any]:
        return await self._run(self._client.list_services)

"""Python client for conductor, a KV-cache indexer.

``ConductorClient`` speaks to conductor's RPC port (``rpc_server_port``,
default 50052) with the method names, return codes and result shapes of the
Mooncake ``ConductorClient`` API, so a router switches by changing its import::

    from conductor_client import ConductorClient, OK

The package is standard library only. ``AsyncConductorClient`` offers the same
methods as coroutines. When register() does not return OK, the client's
``last_error`` (a ``Refusal``) says why.
"""

from ._async import AsyncConductorClient
from ._client import ConductorClient, Refusal
from ._codes import (
    CONDUCTOR_UNAVAILABLE,
    HEALTH_NOT_INITIALIZED,
    HEALTH_OK,
    HEALTH_UNREACHABLE,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    OK,
    RPC_FAIL,
    RPC_TIMEOUT,
    SERVICE_NOT_FOUND,
)

__all__ = [
    "AsyncConductorClient",
    "ConductorClient",
    "Refusal",
    "OK",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "RPC_FAIL",
    "RPC_TIMEOUT",
    "CONDUCTOR_UNAVAILABLE",
    "SERVICE_NOT_FOUND",
    "HEALTH_OK",
    "HEALTH_NOT_INITIALIZED",
    "HEALTH_UNREACHABLE",
]

__version__ = "0.1.0"

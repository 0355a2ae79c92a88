"""The blocking ConductorClient.

Wire framing (conductor's RPC port): HTTP/1.1 with keep-alive, one
``POST /rpc/<Method>`` per call (Query, Register, Unregister, GetGlobalView,
ListServices), a JSON object as the request body and a JSON object as the
answer, always carrying the integer ``ret``. Query's request is the same map
in msgpack (Content-Type application/msgpack) with ``token_ids`` as a bin of
little-endian int32s (``array('i', ids).tobytes()``), so a 128k-token prompt
costs the client and the server a buffer copy, not a JSON list or base64
(the server also takes JSON, with token_ids as an array or base64 text).
"""

import array
import base64
import contextlib
import http.client
import json
import logging
import select
import socket
import struct
import sys
import threading
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Tuple

from ._codes import (
    CONDUCTOR_UNAVAILABLE,
    HEALTH_NOT_INITIALIZED,
    HEALTH_OK,
    HEALTH_UNREACHABLE,
    INVALID_PARAMS,
    OK,
    RPC_FAIL,
    RPC_TIMEOUT,
)
from ._config import check_register_config

_log = logging.getLogger("conductor_client")

# Most idle keep-alive connections kept per client (one per concurrent caller
# up to this bound; more callers open and close their own).
_MAX_IDLE = 64

# Largest status line or header line accepted from the server.
_MAX_LINE = 65536


class _StaleConnection(ConnectionResetError):
    """The server closed a keep-alive connection before answering."""


class _SendFailed(ConnectionResetError):
    """The connection failed before the whole request was sent: the server
    cannot have carried it out, so any call may be sent again."""


# Errors of a reused keep-alive connection that the server closed while idle:
# the request never reached the handler, so it is retried once on a fresh one.
_STALE = (_StaleConnection, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


def parse_addr(addr: Any) -> Optional[Tuple[str, int]]:
    """Split "host:port" (IPv6 as "[::1]:port"); None when malformed."""
    if not isinstance(addr, str) or "://" in addr or "/" in addr:
        return None
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not port.isascii():
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if not host:
            return None
    elif ":" in host:
        return None
    p = int(port)
    if not 0 < p < 65536:
        return None
    return host, p


def token_bytes(token_ids: Any) -> Any:
    """token_ids as little-endian int32 bytes (a bytes-like object).

    Raises TypeError or ValueError (OverflowError included) when token_ids is
    not a sequence of integers that fit in a signed 32-bit integer.
    """
    if isinstance(token_ids, (str, bytes, bytearray, memoryview, dict, set, frozenset)):
        raise TypeError("token_ids must be a sequence of int")
    if isinstance(token_ids, array.array) and token_ids.typecode in ("i", "l") and token_ids.itemsize == 4:
        arr = token_ids
    elif array.array("i").itemsize == 4:
        arr = array.array("i", token_ids)
    else:  # an exotic platform: no 4-byte C int
        ids = list(token_ids)
        try:
            return struct.pack("<%di" % len(ids), *ids)
        except struct.error as e:
            raise OverflowError(str(e)) from None
    if sys.byteorder == "big":
        arr = array.array(arr.typecode, arr)
        arr.byteswap()
    return memoryview(arr).cast("B")


def encode_tokens(token_ids: Any) -> bytes:
    """Base64 of token_ids as little-endian int32s (the JSON form of
    token_ids; the client itself sends msgpack)."""
    return base64.b64encode(token_bytes(token_ids))


def _mp_value(v: Any) -> bytes:
    """One msgpack scalar: str, int (int64 range), bool or None."""
    if v is None:
        return b"\xc0"
    if v is True:
        return b"\xc3"
    if v is False:
        return b"\xc2"
    if isinstance(v, str):
        b = v.encode("utf-8")
        n = len(b)
        if n < 32:
            return bytes((0xA0 | n,)) + b
        if n < 256:
            return b"\xd9" + bytes((n,)) + b
        if n < 65536:
            return b"\xda" + struct.pack(">H", n) + b
        return b"\xdb" + struct.pack(">I", n) + b
    if isinstance(v, int):
        if 0 <= v < 128:
            return bytes((v,))
        if not -(1 << 63) <= v < (1 << 63):
            raise OverflowError("integer beyond 64 bits")
        return b"\xd3" + struct.pack(">q", v)
    raise TypeError("unsupported value %s" % type(v).__name__)


def encode_query(fields: Dict[str, Any], tokens: Any) -> bytes:
    """A msgpack map: "token_ids" first, as a bin32 of tokens (its bytes then
    start at offset 16, 4-byte aligned, so the server views them in place),
    then fields."""
    n = len(tokens) if isinstance(tokens, bytes) else tokens.nbytes
    parts = [bytes((0x80 | (len(fields) + 1),)), b"\xa9token_ids\xc6", struct.pack(">I", n), tokens]
    for k, v in fields.items():
        parts.append(_mp_value(k))
        parts.append(_mp_value(v))
    return b"".join(parts)


class _Conn:
    """One keep-alive HTTP/1.1 connection: a request goes out in a single
    send (headers and body together, so Nagle and delayed ACKs never stall a
    call), the answer is read by Content-Length. Only what conductor's RPC
    port answers is supported; anything else is an HTTPException (RPC_FAIL)."""

    def __init__(self, host: str, port: int, connect_timeout: float, request_timeout: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=connect_timeout)
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock.settimeout(request_timeout)
            self.rfile = self.sock.makefile("rb")
        except BaseException:
            self.sock.close()
            raise
        h = host if ":" not in host else "[" + host + "]"
        self.host = ("%s:%d" % (h, port)).encode("idna")

    def request(self, path: str, body: bytes, ctype: bytes) -> Tuple[int, bytes, bool]:
        head = b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n" % (
            path.encode("ascii"), self.host, ctype, len(body))
        try:
            self.sock.sendall(b"".join((head, body)))
        except (ConnectionResetError, BrokenPipeError) as send_err:
            # The server may have answered before it closed the connection
            # (413 for a body past its limit, sent as soon as the headers
            # declare it): that answer is the call's result. Without one,
            # the request never arrived whole.
            try:
                line = self.rfile.readline(_MAX_LINE)
            except OSError:
                line = b""
            if not line:
                raise _SendFailed(str(send_err)) from send_err
        else:
            line = self.rfile.readline(_MAX_LINE)
        if not line:
            raise _StaleConnection("connection closed before an answer")
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise http.client.BadStatusLine(repr(line[:100]))
        status = int(parts[1])
        keep = parts[0] == b"HTTP/1.1"
        length = -1
        while True:
            h = self.rfile.readline(_MAX_LINE)
            if not h.endswith(b"\n"):
                raise http.client.HTTPException("truncated header")
            if h in (b"\r\n", b"\n"):
                break
            name, _, value = h.partition(b":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == b"content-length":
                if not value.isdigit():
                    raise http.client.HTTPException("bad Content-Length")
                length = int(value)
            elif name == b"connection":
                keep = value != b"close" if parts[0] == b"HTTP/1.1" else value == b"keep-alive"
            elif name == b"transfer-encoding" and value != b"identity":
                raise http.client.HTTPException("unsupported Transfer-Encoding")
        if length < 0:
            data = self.rfile.read()
            keep = False
        else:
            data = self.rfile.read(length)
            if len(data) != length:
                raise http.client.IncompleteRead(data, length - len(data))
        return status, data, keep

    def closed_by_server(self) -> bool:
        """Whether an idle connection is readable: the server closed it (its
        idle timeout, a restart) or sent what no request asked for. poll()
        where there is one: select() refuses descriptors from 1024 on."""
        try:
            if hasattr(select, "poll"):
                p = select.poll()
                p.register(self.sock, select.POLLIN | select.POLLERR | select.POLLHUP)
                return bool(p.poll(0))
            readable, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.rfile.close()
        with contextlib.suppress(OSError):
            self.sock.close()


class _Transport:
    """A pool of keep-alive connections to one conductor RPC port.

    Each call takes an idle connection (or opens one), so concurrent callers
    never share a socket; finished connections go back to the pool.
    """

    def __init__(self, host: str, port: int, connect_timeout: float, request_timeout: float) -> None:
        self.host = host
        self.port = port
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self._lock = threading.Lock()
        self._idle: List[_Conn] = []
        self._closed = False

    def _open(self) -> _Conn:
        return _Conn(self.host, self.port, self.connect_timeout, self.request_timeout)

    def prime(self) -> None:
        """Open one connection (the setup() probe) and keep it idle."""
        self._put(self._open())

    def _take(self) -> Tuple[_Conn, bool]:
        while True:
            with self._lock:
                if not self._idle:
                    if self._closed:
                        raise ConnectionAbortedError("client closed")
                    break
                conn = self._idle.pop()
            if not conn.closed_by_server():
                return conn, True
            conn.close()
        return self._open(), False

    def _put(self, conn: _Conn) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < _MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def _drop_idle(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    def request(self, path: str, body: bytes, ctype: bytes, idempotent: bool = True) -> Tuple[int, bytes]:
        """Send one call; a reused connection that fails is replaced by a new
        one and the call sent once more, unless the call is not idempotent
        and was sent whole (the server may have carried it out before the
        connection went: sending it again could change its answer)."""
        conn, reused = self._take()
        for attempt in (0, 1):
            try:
                status, data, keep = conn.request(path, body, ctype)
            except _STALE as e:
                conn.close()
                if reused and attempt == 0 and (idempotent or isinstance(e, _SendFailed)):
                    # The server closed this idle connection, and with it
                    # (a restart, its idle timeout) the other pooled ones
                    # most likely: drop them all and retry once on a new
                    # connection, not on another stale one.
                    self._drop_idle()
                    with self._lock:
                        if self._closed:
                            raise ConnectionAbortedError("client closed") from None
                    conn, reused = self._open(), False
                    continue
                raise
            except BaseException:
                conn.close()
                raise
            if keep:
                self._put(conn)
            else:
                conn.close()
            return status, data
        raise ConnectionResetError("unreachable")  # pragma: no cover

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()


class Refusal(NamedTuple):
    """Why a register() call did not return OK (ConductorClient.last_error).

    ``ret`` is the code register() returned. When conductor answered, the rest
    is its error envelope: ``reason`` a stable token (``invalid_value``,
    ``invalid_registration``, ``limit_exceeded``, ``forbidden``, ... as in
    conductor's docs/http-api.md), ``field`` the config key it refused (None
    when the refusal names none, as for a conflict with another
    registration), ``message`` the cause in words. When it did not
    (not connected, transport failure, timeout), ``reason`` is "" and
    ``message`` says what failed.
    """

    ret: int
    reason: str
    field: Optional[str]
    message: str


# What a failure without an answer from conductor means, by code.
_LOCAL_FAILURES = {
    CONDUCTOR_UNAVAILABLE: "not connected: call setup() first",
    RPC_FAIL: "no valid answer from the RPC port (transport failure)",
    RPC_TIMEOUT: "conductor did not answer within request_timeout_ms",
}


def _refusal(ret: int, doc: Optional[Dict[str, Any]]) -> Refusal:
    """The Refusal of a failed call: ret, and the server's envelope in doc."""
    if doc is None:
        return Refusal(ret, "", None, _LOCAL_FAILURES.get(ret, "failed"))
    reason, field, message = doc.get("reason"), doc.get("field"), doc.get("error")
    return Refusal(
        ret,
        reason if isinstance(reason, str) else "",
        field if isinstance(field, str) and field else None,
        message if isinstance(message, str) else "",
    )


def _timeout_s(ms: Any) -> Optional[float]:
    if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not ms > 0:
        return None
    return ms / 1000.0


class ConductorClient:
    """Client of conductor's RPC service (the Mooncake ConductorClient API).

    Create it unconnected, then call setup(). Every method is safe to call from
    many threads at once: each call uses its own pooled keep-alive connection.
    Methods return the API's integer codes (or dicts carrying "ret"); transport
    failures are RPC_FAIL, timeouts RPC_TIMEOUT, and calls before setup() or
    after close() CONDUCTOR_UNAVAILABLE. Only register() raises, with
    ValueError, for a malformed configuration. When register() does not
    return OK, last_error says why, and a registration conductor refuses is
    logged once at WARNING (logger "conductor_client") with its reason.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._transport: Optional[_Transport] = None
        self._tls = threading.local()

    @property
    def last_error(self) -> Optional[Refusal]:
        """Why the calling thread's latest register() did not return OK: a
        Refusal (ret, reason, field, message), the server's reason when
        conductor refused the registration. None after a register() that
        returned OK, after one that raised ValueError (the exception says
        why), and before any. Per thread, as calls from many threads may
        overlap."""
        return getattr(self._tls, "last_error", None)

    # -- lifecycle ---------------------------------------------------------

    def __enter__(self) -> "ConductorClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def setup(self, conductor_addr: str, connect_timeout_ms: int = 1000, request_timeout_ms: int = 3000) -> int:
        """Connect to conductor's RPC port at "host:port".

        Replaces any previous connection; on failure the client is left
        uninitialized. Returns OK, INVALID_PARAMS (malformed address or
        timeouts) or RPC_FAIL (the connection failed).
        """
        self._swap(None)
        addr = parse_addr(conductor_addr)
        cto, rto = _timeout_s(connect_timeout_ms), _timeout_s(request_timeout_ms)
        if addr is None or cto is None or rto is None:
            return INVALID_PARAMS
        t = _Transport(addr[0], addr[1], cto, rto)
        try:
            t.prime()
        except (OSError, http.client.HTTPException) as e:
            _log.debug("conductor setup %s failed: %s", conductor_addr, e)
            t.close()
            return RPC_FAIL
        self._swap(t)
        return OK

    def close(self) -> int:
        """Release the connections; safe to repeat. Always returns OK."""
        self._swap(None)
        return OK

    def _swap(self, t: Optional[_Transport]) -> None:
        with self._lock:
            old, self._transport = self._transport, t
        if old is not None:
            old.close()

    def health_check(self) -> int:
        """HEALTH_OK when a ListServices probe succeeds, HEALTH_NOT_INITIALIZED
        before a successful setup() or after close(), else HEALTH_UNREACHABLE."""
        if self._transport is None:
            return HEALTH_NOT_INITIALIZED
        ret, _ = self._call("ListServices", b"{}")
        if ret == OK:
            return HEALTH_OK
        if ret == CONDUCTOR_UNAVAILABLE:
            return HEALTH_NOT_INITIALIZED
        return HEALTH_UNREACHABLE

    # -- calls -------------------------------------------------------------

    def _call(self, method: str, body: bytes, ctype: bytes = b"application/json") -> Tuple[int, Optional[Dict[str, Any]]]:
        t = self._transport
        if t is None:
            return CONDUCTOR_UNAVAILABLE, None
        try:
            # Unregister is the one call whose repeat answers otherwise
            # (SERVICE_NOT_FOUND); Register again is the same registration.
            status, data = t.request("/rpc/" + method, body, ctype, idempotent=method != "Unregister")
        except socket.timeout:
            return RPC_TIMEOUT, None
        except (OSError, http.client.HTTPException) as e:
            _log.debug("conductor %s: transport failure: %s", method, e)
            if self._transport is not t:
                return CONDUCTOR_UNAVAILABLE, None
            return RPC_FAIL, None
        try:
            doc = json.loads(data)
        except ValueError:
            doc = None
        ret = doc.get("ret") if isinstance(doc, dict) else None
        if type(ret) is not int:
            _log.debug("conductor %s: HTTP %d without a ret: %r", method, status, data[:200])
            return RPC_FAIL, None
        if ret != OK:
            _log.debug("conductor %s: ret %d: %s", method, ret, doc.get("error"))
        return ret, doc

    def query(
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
        """Prefix-cache hits for a prompt: {"ret": int, "hits": {instance_id:
        {"longest_matched", "dp", "rank_matches", "device", "cpu_local",
        "cpu_share", "disk"}}}. hits is {} on failure. A query no indexed
        context serves (nothing registered that model, block size, tenant or
        LoRA, or a name is misspelt) also carries "miss", the reason:
        "unknown_tenant", "unknown_model", "unknown_block_size" or
        "unknown_lora"."""
        if self._transport is None:
            return {"ret": CONDUCTOR_UNAVAILABLE, "hits": {}}
        try:
            body = encode_query(
                {
                    "model_name": model_name,
                    "lora_name": lora_name,
                    "block_size": block_size,
                    "tenant_id": tenant_id,
                    "cache_salt": cache_salt,
                    "instance_filter": instance_filter,
                },
                token_bytes(token_ids),
            )
        except (TypeError, ValueError, OverflowError) as e:
            _log.debug("conductor query: invalid arguments: %s", e)
            return {"ret": INVALID_PARAMS, "hits": {}}
        ret, doc = self._call("Query", body, b"application/msgpack")
        if ret != OK or doc is None:
            return {"ret": ret, "hits": {}}
        hits = doc.get("hits")
        if not isinstance(hits, dict):
            return {"ret": RPC_FAIL, "hits": {}}
        miss = doc.get("miss")
        if isinstance(miss, str) and miss:
            return {"ret": OK, "hits": hits, "miss": miss}
        return {"ret": OK, "hits": hits}

    def register(self, config: Dict[str, Any]) -> int:
        """Register one publisher subscription (Python field names).

        Raises ValueError for a config that is not a dict, has unknown or
        non-string keys, wrong types, overflowing integers, bool for an integer
        field, an unknown publisher_type, or a malformed hash_profile. Values
        the server refuses return INVALID_PARAMS.

        When the result is not OK, last_error holds a Refusal saying why
        (None after OK). A refusal from conductor (INVALID_PARAMS for a bad
        value or a conflict with another registration, RPC_FAIL for a missing
        right) is also logged once at WARNING, naming the instance, the
        reason token, the field and the server's message.
        """
        self._tls.last_error = None
        check_register_config(config)
        if self._transport is None:
            ret, doc = CONDUCTOR_UNAVAILABLE, None
        else:
            ret, doc = self._call("Register", json.dumps(config, separators=(",", ":")).encode())
        if ret == OK:
            return ret
        err = _refusal(ret, doc)
        self._tls.last_error = err
        if doc is not None:
            _log.warning(
                "conductor refused register of instance_id %r: reason %s%s: %s (ret %d)",
                config.get("instance_id"), err.reason or "unknown",
                ", field " + err.field if err.field else "", err.message, ret,
            )
        return ret

    def unregister(self, instance_id: str, tenant_id: str = "default", dp_rank: int = 0) -> int:
        """Stop the subscription (instance_id, tenant_id, dp_rank): OK,
        SERVICE_NOT_FOUND, or another negative code."""
        if self._transport is None:
            return CONDUCTOR_UNAVAILABLE
        try:
            body = json.dumps(
                {"instance_id": instance_id, "tenant_id": tenant_id, "dp_rank": dp_rank}, separators=(",", ":")
            ).encode()
        except (TypeError, ValueError):
            return INVALID_PARAMS
        ret, _ = self._call("Unregister", body)
        return ret

    def get_global_view(self) -> Dict[str, Any]:
        """{"ret", "context_count", "contexts"}; each context's "instances"
        maps instance ids to sets of DP ranks."""
        ret, doc = self._call("GetGlobalView", b"{}")
        if ret != OK or doc is None:
            return {"ret": ret, "context_count": 0, "contexts": []}
        contexts = doc.get("contexts")
        if not isinstance(contexts, list):
            return {"ret": RPC_FAIL, "context_count": 0, "contexts": []}
        for c in contexts:
            if isinstance(c, dict) and isinstance(c.get("instances"), dict):
                c["instances"] = {k: set(v) for k, v in c["instances"].items()}
        return {"ret": OK, "context_count": doc.get("context_count", len(contexts)), "contexts": contexts}

    def list_services(self) -> Dict[str, Any]:
        """{"ret", "count", "services"}; services use the export keys Endpoint,
        ReplayEndpoint, Type, ModelName, LoraName, TenantID, InstanceID,
        BlockSize, DPRank, CacheGroup, HashProfile, and HashCheck: the hash
        profile self-check, {"state": "unverified" | "verified" | "mismatch",
        "samples", "detail", "found"} (found: the profile that reproduces the
        engine's block hashes when the registered one does not, else None)."""
        ret, doc = self._call("ListServices", b"{}")
        if ret != OK or doc is None:
            return {"ret": ret, "count": 0, "services": []}
        services = doc.get("services")
        if not isinstance(services, list):
            return {"ret": RPC_FAIL, "count": 0, "services": []}
        return {"ret": OK, "count": doc.get("count", len(services)), "services": services}

"""ConductorClient against a real conductor process (and a real ZMQ publisher).

Run from python/: python3 -m unittest discover -s tests -t .
"""

import array
import asyncio
import base64
import contextlib
import io
import logging
import os
import socket
import struct
import sys
import textwrap
import threading
import time
import unittest
from typing import Any, Dict, List

import conductor_client
from conductor_client import (
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
    AsyncConductorClient,
    ConductorClient,
    Refusal,
)
from conductor_client._client import _mp_value, encode_query, encode_tokens, parse_addr, token_bytes

from . import harness

# The seed's (conductor-python-api.md) Quick Start and register() example,
# copied verbatim; only the import line is replaced when they run.
SEED_QUICK_START = '''\
from mooncake.conductor import ConductorClient, OK

with ConductorClient() as client:
    rc = client.setup("127.0.0.1:50052")
    if rc != OK:
        raise RuntimeError(f"Conductor setup failed: {rc}")

    result = client.query(
        "my-model",
        block_size=16,
        token_ids=list(range(32)),
    )
    if result["ret"] != OK:
        raise RuntimeError(f"Conductor query failed: {result['ret']}")
    print(result["hits"])  # {} while no engine instances are registered
'''

SEED_REGISTER = '''\
rc = client.register({
    "instance_id": "vllm-0",
    "endpoint": "tcp://127.0.0.1:5557",
    "publisher_type": "vLLM",
    "model_name": "my-model",
    "block_size": 16,
    "dp_rank": 0,
    "hash_profile": {
        "strategy": "vllm_v1",
        "algorithm": "sha256_cbor",
        "python_hash_seed": "0",
        "index_projection": "low64_be",
    },
})
if rc != OK:
    raise RuntimeError(f"Publisher registration failed: {rc}")
'''

CBOR = {"strategy": "vllm_v1", "algorithm": "sha256_cbor", "python_hash_seed": "0", "index_projection": "low64_be"}

SERVICE_KEYS = {
    "Endpoint", "ReplayEndpoint", "Type", "ModelName", "LoraName", "TenantID",
    "InstanceID", "BlockSize", "DPRank", "CacheGroup", "HashProfile", "HashCheck",
}


def reg(**kw: Any) -> Dict[str, Any]:
    c = {
        "instance_id": "inst",
        "endpoint": "tcp://127.0.0.1:1",
        "model_name": "m",
        "block_size": 16,
        "hash_profile": dict(CBOR),
    }
    c.update(kw)
    return c


_conductor = None


def setUpModule() -> None:
    global _conductor
    _conductor = harness.Conductor()


def tearDownModule() -> None:
    if _conductor is not None:
        _conductor.close()
    harness.cleanup_builds()


def addr() -> str:
    assert _conductor is not None
    return _conductor.rpc_addr


class _Silent(threading.Thread):
    """A TCP server that misbehaves: mode "hold" never answers, "close"
    closes every connection at once, "garbage" answers non-JSON."""

    def __init__(self, mode: str) -> None:
        super().__init__(daemon=True)
        self.mode = mode
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held: List[socket.socket] = []
        self.stop = False
        self.start()

    def run(self) -> None:
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            if self.mode == "hold":
                self.held.append(c)
            elif self.mode == "close":
                c.close()
            else:
                c.settimeout(2)
                with contextlib.suppress(OSError):
                    c.recv(65536)
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc")
                c.close()

    def close(self) -> None:
        self.stop = True
        self.sock.close()
        for c in self.held:
            c.close()


class _DropsUnregister(threading.Thread):
    """A keep-alive RPC server that answers every call with no services, except
    Unregister: it records it (as carried out) and closes the connection
    without answering."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.unregisters = 0
        self.accepted = 0
        self.start()

    def run(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c: socket.socket) -> None:
        f = c.makefile("rb")
        with contextlib.closing(c), contextlib.suppress(OSError):
            while True:
                line = f.readline()
                if not line:
                    return
                length = 0
                while True:
                    h = f.readline()
                    if h in (b"\r\n", b""):
                        break
                    if h.lower().startswith(b"content-length:"):
                        length = int(h.split(b":")[1])
                f.read(length)
                if b"/rpc/Unregister" in line:
                    self.unregisters += 1
                    return
                answer = b'{"ret":0,"count":0,"services":[]}'
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(answer), answer))

    def close(self) -> None:
        self.sock.close()


class EncodingTest(unittest.TestCase):
    def test_tokens_are_base64_little_endian_int32(self) -> None:
        for ids in ([], [0], [1, 2, 3], [-1, 2**31 - 1, -(2**31)], list(range(1000))):
            want = base64.b64encode(struct.pack("<%di" % len(ids), *ids))
            self.assertEqual(encode_tokens(ids), want)
            self.assertEqual(encode_tokens(tuple(ids)), want)
            self.assertEqual(encode_tokens(array.array("i", ids)), want)
        self.assertEqual(encode_tokens(range(5)), base64.b64encode(struct.pack("<5i", 0, 1, 2, 3, 4)))
        for bad in ([2**31], [-(2**31) - 1], [1.5], ["1"], "abc", b"ab", {1: 2}, None, 5):
            with self.assertRaises((TypeError, ValueError, OverflowError)):
                encode_tokens(bad)

    def test_token_bytes(self) -> None:
        for ids in ([], [7], [-1, 2**31 - 1, -(2**31)]):
            self.assertEqual(bytes(token_bytes(ids)), struct.pack("<%di" % len(ids), *ids))

    def test_msgpack_query_encoding(self) -> None:
        # expected bytes written from the msgpack spec's formats
        cases = [
            (None, b"\xc0"), (True, b"\xc3"), (False, b"\xc2"), (0, b"\x00"), (127, b"\x7f"),
            (128, b"\xd3" + (128).to_bytes(8, "big")), (-1, b"\xd3" + b"\xff" * 8),
            ("", b"\xa0"), ("m", b"\xa1m"), ("x" * 31, b"\xbf" + b"x" * 31), ("x" * 32, b"\xd9\x20" + b"x" * 32),
            ("x" * 256, b"\xda\x01\x00" + b"x" * 256), ("x" * 65536, b"\xdb\x00\x01\x00\x00" + b"x" * 65536),
            ("é", b"\xa2\xc3\xa9"),
        ]
        for v, want in cases:
            self.assertEqual(_mp_value(v), want, v)
        for bad in (2**63, -(2**63) - 1, 1.5, [1], b"x"):
            with self.assertRaises((TypeError, OverflowError)):
                _mp_value(bad)
        got = encode_query({"model_name": "m", "block_size": 16}, token_bytes([1, 2]))
        self.assertEqual(got, b"\x83\xa9token_ids\xc6\x00\x00\x00\x08" + struct.pack("<2i", 1, 2)
                         + b"\xaamodel_name\xa1m\xaablock_size\x10")
        self.assertEqual(got.index(struct.pack("<2i", 1, 2)), 16)  # 4-byte aligned in the body

    def test_parse_addr(self) -> None:
        good = {"127.0.0.1:50052": ("127.0.0.1", 50052), "localhost:1": ("localhost", 1), "[::1]:9": ("::1", 9)}
        for a, want in good.items():
            self.assertEqual(parse_addr(a), want)
        for a in ("127.0.0.1", "127.0.0.1:", ":50052", "http://127.0.0.1:50052", "::1:9", "h:0", "h:65536",
                  "h:-1", "h: 1", "h:1x", None, 50052, "[]:1", "h:٣"):
            self.assertIsNone(parse_addr(a), a)


class ConfigKeyTest(unittest.TestCase):
    def test_unknown_key_names_the_nearest(self) -> None:
        # raised before the connection state matters; the hints are the
        # register() names the seed documents
        cases = [
            (reg(modelname="m"), "unknown config key 'modelname'; did you mean 'model_name'?"),
            (reg(type="vLLM"), "unknown config key 'type'; did you mean 'publisher_type'?"),
            (reg(replay_endpont="tcp://127.0.0.1:2"), "unknown config key 'replay_endpont'; did you mean 'replay_endpoint'?"),
            (reg(blocksize=16), "unknown config key 'blocksize'; did you mean 'block_size'?"),
            (reg(qqqqqqqq=1), "unknown config key 'qqqqqqqq'"),
            (reg(hash_profile=dict(CBOR, algoritm="sha256")), "unknown hash_profile key 'algoritm'; did you mean 'algorithm'?"),
            (reg(hash_profile=dict(CBOR, root_digest="0" * 64)),
             "unknown hash_profile key 'root_digest' (root_digest is derived by the server)"),
        ]
        for cfg, want in cases:
            with self.assertRaises(ValueError, msg=repr(cfg)) as cm:
                ConductorClient().register(cfg)
            self.assertEqual(str(cm.exception), want)
        # every key the seed's register() table names is accepted
        full = reg(replay_endpoint="", publisher_type="vLLM", lora_name="", tenant_id="", dp_rank=0, cache_group=None)
        self.assertEqual(ConductorClient().register(full), CONDUCTOR_UNAVAILABLE)


class SeedExamplesTest(unittest.TestCase):
    def test_quick_start_and_register_example_verbatim(self) -> None:
        """The seed's Quick Start, with its register() example inside the with
        block, run as written apart from the import line."""
        code = SEED_QUICK_START + textwrap.indent(SEED_REGISTER, "    ")
        code = code.replace("from mooncake.conductor import ConductorClient, OK",
                            "from conductor_client import ConductorClient, OK")
        own = None
        target = addr()
        if harness.port_free(50052):
            own = harness.Conductor(rpc_port=50052)
            target = own.rpc_addr
        else:  # the seed's port is taken on this machine: point the snippet at ours
            sys.stderr.write("note: 127.0.0.1:50052 is busy; the Quick Start runs against %s\n" % target)
            code = code.replace("127.0.0.1:50052", target)
        try:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(code, "seed_quick_start", "exec"), {})
            self.assertEqual(out.getvalue(), "{}\n")
            with ConductorClient() as c:
                self.assertEqual(c.setup(target), OK)
                svcs = c.list_services()
                mine = [s for s in svcs["services"] if s["InstanceID"] == "vllm-0"]
                self.assertEqual(len(mine), 1)
                self.assertEqual(mine[0]["Endpoint"], "tcp://127.0.0.1:5557")
                self.assertEqual(mine[0]["Type"], "vLLM")
                self.assertEqual(c.unregister("vllm-0"), OK)
        finally:
            if own is not None:
                own.close()


class LifecycleTest(unittest.TestCase):
    def check_unavailable(self, c: ConductorClient) -> None:
        self.assertEqual(c.health_check(), HEALTH_NOT_INITIALIZED)
        self.assertEqual(c.query("m", block_size=16, token_ids=[1]), {"ret": CONDUCTOR_UNAVAILABLE, "hits": {}})
        self.assertEqual(c.register(reg()), CONDUCTOR_UNAVAILABLE)
        self.assertEqual(c.unregister("x"), CONDUCTOR_UNAVAILABLE)
        self.assertEqual(c.get_global_view(), {"ret": CONDUCTOR_UNAVAILABLE, "context_count": 0, "contexts": []})
        self.assertEqual(c.list_services(), {"ret": CONDUCTOR_UNAVAILABLE, "count": 0, "services": []})

    def test_lifecycle(self) -> None:
        c = ConductorClient()
        self.check_unavailable(c)
        self.assertEqual(c.setup(addr()), OK)
        self.assertEqual(c.health_check(), HEALTH_OK)
        self.assertEqual(c.list_services()["ret"], OK)
        self.assertEqual(c.close(), OK)
        self.assertEqual(c.close(), OK)
        self.check_unavailable(c)
        self.assertEqual(c.setup(addr()), OK)  # reconnect after close
        self.assertEqual(c.setup(addr()), OK)  # setup again replaces the connection
        self.assertEqual(c.health_check(), HEALTH_OK)
        # a failed setup leaves the client uninitialized
        self.assertEqual(c.setup("127.0.0.1"), INVALID_PARAMS)
        self.check_unavailable(c)
        self.assertEqual(c.setup(addr()), OK)
        self.assertEqual(c.setup("127.0.0.1:%d" % harness.free_port()), RPC_FAIL)
        self.check_unavailable(c)

    def test_context_manager_closes_on_exception(self) -> None:
        c = ConductorClient()
        with self.assertRaises(KeyError):
            with c as entered:
                self.assertIs(entered, c)
                self.assertEqual(c.health_check(), HEALTH_NOT_INITIALIZED)  # entering does not set up
                self.assertEqual(c.setup(addr()), OK)
                raise KeyError("boom")
        self.assertEqual(c.health_check(), HEALTH_NOT_INITIALIZED)

    def test_setup_errors(self) -> None:
        c = ConductorClient()
        for bad in ("127.0.0.1", "http://" + addr(), "127.0.0.1:port", "", "[::1]"):
            self.assertEqual(c.setup(bad), INVALID_PARAMS, bad)
        self.assertEqual(c.setup(addr(), connect_timeout_ms=0), INVALID_PARAMS)
        self.assertEqual(c.setup(addr(), request_timeout_ms=True), INVALID_PARAMS)
        self.assertEqual(c.setup("127.0.0.1:%d" % harness.free_port()), RPC_FAIL)
        self.assertEqual(c.health_check(), HEALTH_NOT_INITIALIZED)

    def test_timeout(self) -> None:
        srv = _Silent("hold")
        self.addCleanup(srv.close)
        c = ConductorClient()
        self.addCleanup(c.close)
        self.assertEqual(c.setup("127.0.0.1:%d" % srv.port, request_timeout_ms=200), OK)
        t0 = time.monotonic()
        self.assertEqual(c.query("m", block_size=16, token_ids=[1]), {"ret": RPC_TIMEOUT, "hits": {}})
        self.assertLess(time.monotonic() - t0, 10)
        self.assertEqual(c.list_services()["ret"], RPC_TIMEOUT)
        self.assertEqual(c.register(reg()), RPC_TIMEOUT)
        self.assertEqual(c.last_error, Refusal(RPC_TIMEOUT, "", None, "conductor did not answer within request_timeout_ms"))
        self.assertEqual(c.health_check(), HEALTH_UNREACHABLE)

    def test_transport_failures(self) -> None:
        for mode in ("close", "garbage"):
            srv = _Silent(mode)
            c = ConductorClient()
            try:
                self.assertEqual(c.setup("127.0.0.1:%d" % srv.port), OK)
                self.assertEqual(c.query("m", block_size=16, token_ids=[1]), {"ret": RPC_FAIL, "hits": {}}, mode)
                self.assertEqual(c.unregister("x"), RPC_FAIL, mode)
                self.assertEqual(c.register(reg()), RPC_FAIL, mode)
                self.assertEqual(c.last_error, Refusal(RPC_FAIL, "", None, "no valid answer from the RPC port (transport failure)"), mode)
                self.assertEqual(c.get_global_view()["ret"], RPC_FAIL, mode)
                self.assertEqual(c.health_check(), HEALTH_UNREACHABLE, mode)
            finally:
                c.close()
                srv.close()

    def test_pooled_connections_after_server_restart(self) -> None:
        # A client used from many threads pools several keep-alive
        # connections; once the server closed them all (a restart, or its
        # idle timeout), the next call still answers from the live server.
        own = harness.Conductor()
        try:
            c = ConductorClient()
            self.assertEqual(c.setup(own.rpc_addr), OK)
            barrier = threading.Barrier(8)

            def call() -> None:
                barrier.wait()
                c.list_services()

            threads = [threading.Thread(target=call) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            transport = c._transport  # type: ignore[attr-defined]
            self.assertGreaterEqual(len(transport._idle), 3)  # several pooled connections
            own.close()
            own = harness.Conductor(rpc_port=own.rpc_port, http_port=own.http_port)
            self.assertEqual([c.health_check() for _ in range(3)], [HEALTH_OK] * 3)
            self.assertEqual(c.query("m", block_size=16, token_ids=[1])["ret"], OK)
            c.close()
        finally:
            own.close()

    def test_unregister_sent_once(self) -> None:
        # An Unregister the server carried out on a pooled connection and
        # then lost the connection before answering is not sent again (a
        # second one would answer SERVICE_NOT_FOUND for a call that
        # succeeded): the caller gets RPC_FAIL. Other calls are retried.
        srv = _DropsUnregister()
        self.addCleanup(srv.close)
        c = ConductorClient()
        self.addCleanup(c.close)
        self.assertEqual(c.setup("127.0.0.1:%d" % srv.port), OK)
        self.assertEqual(c.list_services()["ret"], OK)  # a pooled connection
        self.assertEqual(c.unregister("x"), RPC_FAIL)
        self.assertEqual(srv.unregisters, 1)

    def test_keep_alive_with_many_descriptors(self) -> None:
        # A process holding more than 1024 descriptors (a busy serving
        # engine) still reuses its pooled connection: the check that the
        # server has not closed it works for any descriptor number.
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = 1200
        if hard != resource.RLIM_INFINITY and hard < want:
            self.skipTest("RLIMIT_NOFILE hard limit %d: no descriptor numbers above 1024 to test" % hard)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            self.addCleanup(resource.setrlimit, resource.RLIMIT_NOFILE, (soft, hard))
        held = [open(os.devnull) for _ in range(1100)]
        self.addCleanup(lambda: [f.close() for f in held])
        srv = _DropsUnregister()
        self.addCleanup(srv.close)
        c = ConductorClient()
        self.addCleanup(c.close)
        self.assertEqual(c.setup("127.0.0.1:%d" % srv.port), OK)
        for _ in range(5):
            self.assertEqual(c.list_services()["ret"], OK)
        self.assertGreaterEqual(c._transport._idle[0].sock.fileno(), 1024)  # type: ignore[attr-defined]
        self.assertEqual(srv.accepted, 1)

    def test_server_gone_then_back(self) -> None:
        own = harness.Conductor()
        try:
            c = ConductorClient()
            self.assertEqual(c.setup(own.rpc_addr), OK)
            self.assertEqual(c.health_check(), HEALTH_OK)
            own.stop()
            self.assertEqual(c.query("m", block_size=16, token_ids=[1])["ret"], RPC_FAIL)
            self.assertEqual(c.health_check(), HEALTH_UNREACHABLE)
            c.close()
        finally:
            own.close()


@contextlib.contextmanager
def _captured(name: str) -> Any:
    """The records logger name emits (at any level) inside the block."""
    records: List[logging.LogRecord] = []

    class _H(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    lg, h = logging.getLogger(name), _H(logging.DEBUG)
    old = lg.level
    lg.addHandler(h)
    lg.setLevel(logging.DEBUG)
    try:
        yield records
    finally:
        lg.removeHandler(h)
        lg.setLevel(old)


class RegisterTest(unittest.TestCase):
    def setUp(self) -> None:
        self.c = ConductorClient()
        self.assertEqual(self.c.setup(addr()), OK)
        self.addCleanup(self.c.close)

    def test_value_errors(self) -> None:
        bad = [
            None, [], "x", [("model_name", "m")],
            {1: "x"},
            reg(unknown=1),
            reg(modelname="m"),
            reg(type="vLLM"),
            reg(additional_salt="s"),
            reg(model_name=5),
            reg(endpoint=None),
            reg(instance_id=b"x"),
            reg(tenant_id=None),
            reg(replay_endpoint=1),
            reg(lora_name=0),
            reg(block_size="16"),
            reg(block_size=16.0),
            reg(block_size=True),
            reg(block_size=2**63),
            reg(dp_rank=False),
            reg(dp_rank=2**31),
            reg(dp_rank=-(2**31) - 1),
            reg(cache_group=True),
            reg(cache_group="0"),
            reg(cache_group=2**64),
            reg(publisher_type="vllm"),
            reg(publisher_type="VLLM"),
            reg(publisher_type="standard"),
            reg(publisher_type=None),
            reg(hash_profile="vllm_v1"),
            reg(hash_profile=None),
            reg(hash_profile=dict(CBOR, root_digest="0" * 64)),
            reg(hash_profile=dict(CBOR, extra="x")),
            reg(hash_profile={1: "x"}),
            reg(hash_profile=dict(CBOR, python_hash_seed=0)),
            reg(hash_profile=dict(CBOR, strategy=None)),
        ]
        for cfg in bad:
            with self.assertRaises(ValueError, msg=repr(cfg)):
                self.c.register(cfg)  # type: ignore[arg-type]
        # raised before the connection state matters
        with self.assertRaises(ValueError):
            ConductorClient().register(reg(block_size=True))
        self.assertEqual(self.c.list_services()["count"], 0)

    def test_server_validation_is_invalid_params(self) -> None:
        cases = [
            reg(block_size=0),
            reg(block_size=-1),
            reg(dp_rank=-1),
            reg(cache_group=1),
            reg(endpoint=""),
            reg(model_name=""),
            reg(instance_id=""),
            {k: v for k, v in reg().items() if k != "endpoint"},
            {k: v for k, v in reg().items() if k != "hash_profile"},
            {k: v for k, v in reg().items() if k != "instance_id"},
            reg(hash_profile={"strategy": "vllm_v1", "algorithm": "sha256_cbor", "index_projection": "low64_be"}),
            reg(hash_profile=dict(CBOR, algorithm="md5")),
            reg(hash_profile=dict(CBOR, python_hash_seed="4294967296")),
            reg(hash_profile={"strategy": "sglang", "algorithm": "sha256_raw", "index_projection": "low64_be"}),
        ]
        for cfg in cases:
            with self.assertLogs("conductor_client", logging.WARNING):
                self.assertEqual(self.c.register(cfg), INVALID_PARAMS, cfg)
        self.assertEqual(self.c.list_services()["count"], 0)

    def test_refusal_reason(self) -> None:
        """A refused registration returns the seed's code; last_error and one
        WARNING record carry conductor's reason, field and message."""
        self.assertIsNone(self.c.last_error)
        # A value the server refuses: the hash profile's algorithm.
        with self.assertLogs("conductor_client", logging.WARNING) as logs:
            rc = self.c.register(reg(instance_id="r0", endpoint="tcp://127.0.0.1:9", model_name="refusals",
                                     hash_profile=dict(CBOR, algorithm="md5")))
        self.assertEqual(rc, INVALID_PARAMS)
        err = self.c.last_error
        assert err is not None
        self.assertIsInstance(err, Refusal)
        self.assertEqual((err.ret, err.reason, err.field), (INVALID_PARAMS, "invalid_value", "algorithm"))
        self.assertIn('hash_profile.algorithm="md5"', err.message)
        self.assertEqual([r.levelno for r in logs.records], [logging.WARNING])
        self.assertEqual(
            logs.records[0].getMessage(),
            "conductor refused register of instance_id 'r0': reason invalid_value, field algorithm: "
            + err.message + " (ret -600)")

        # Success clears it, and logs nothing at WARNING.
        with _captured("conductor_client") as records:
            self.assertEqual(self.c.register(reg(instance_id="r0", endpoint="tcp://127.0.0.1:9", model_name="refusals")), OK)
        self.addCleanup(self.c.unregister, "r0")
        self.assertIsNone(self.c.last_error)
        self.assertEqual([r for r in records if r.levelno >= logging.WARNING], [])

        # A conflict with another registration: its endpoint, the field named.
        with self.assertLogs("conductor_client", logging.WARNING) as logs:
            rc = self.c.register(reg(instance_id="r1", endpoint="tcp://127.0.0.1:9", model_name="refusals"))
        self.assertEqual(rc, INVALID_PARAMS)
        err = self.c.last_error
        assert err is not None
        self.assertEqual((err.ret, err.reason, err.field), (INVALID_PARAMS, "invalid_registration", "endpoint"))
        self.assertIn("endpoint tcp://127.0.0.1:9 is used by r0|default|0", err.message)
        self.assertEqual(len(logs.records), 1)
        self.assertIn("'r1': reason invalid_registration, field endpoint: register r1|default|0: endpoint",
                      logs.records[0].getMessage())

        # Per thread: another thread's latest register() is its own.
        seen: List[Any] = []
        t = threading.Thread(target=lambda: seen.append(self.c.last_error))
        t.start()
        t.join(10)
        self.assertEqual(seen, [None])
        self.assertEqual(self.c.last_error, err)

        # A ValueError leaves None (the exception says why).
        with self.assertRaises(ValueError):
            self.c.register(reg(block_size=True))
        self.assertIsNone(self.c.last_error)

        # A failure of the client itself: no reason from conductor, no WARNING.
        c2 = ConductorClient()
        with _captured("conductor_client") as records:
            self.assertEqual(c2.register(reg()), CONDUCTOR_UNAVAILABLE)
        self.assertEqual(c2.last_error, Refusal(CONDUCTOR_UNAVAILABLE, "", None, "not connected: call setup() first"))
        self.assertEqual([r for r in records if r.levelno >= logging.WARNING], [])

    def test_register_views_unregister(self) -> None:
        self.assertEqual(self.c.register(reg(instance_id="a", endpoint="tcp://127.0.0.1:2", replay_endpoint="tcp://127.0.0.1:3",
                                             publisher_type="vLLM", model_name="rv", lora_name="l", tenant_id="", dp_rank=1,
                                             cache_group=0)), OK)
        self.assertEqual(self.c.register(reg(instance_id="a", endpoint="tcp://127.0.0.1:4", model_name="rv", lora_name="l", cache_group=None)), OK)
        self.assertEqual(self.c.register(reg(instance_id="s", endpoint="tcp://127.0.0.1:5", publisher_type="SGLang", model_name="sg",
                                             block_size=2, hash_profile={"strategy": "sglang", "algorithm": "sha256_raw",
                                                                         "index_projection": "first64_be"})), OK)
        # a different recipe for the same context is refused
        with self.assertLogs("conductor_client", logging.WARNING):
            self.assertEqual(self.c.register(reg(instance_id="b", endpoint="tcp://127.0.0.1:6", model_name="rv", lora_name="l",
                                                 hash_profile=dict(CBOR, python_hash_seed="1"))), INVALID_PARAMS)
        svcs = self.c.list_services()
        self.assertEqual(svcs["ret"], OK)
        self.assertEqual(svcs["count"], 3)
        by = {(s["InstanceID"], s["DPRank"]): s for s in svcs["services"]}
        for s in svcs["services"]:
            self.assertEqual(set(s), SERVICE_KEYS)
            self.assertEqual(set(s["HashProfile"]), {"strategy", "algorithm", "python_hash_seed", "root_digest", "index_projection"})
            self.assertRegex(s["HashProfile"]["root_digest"], "^[0-9a-f]{64}$")
            # no engine has published yet: nothing verified the profile
            self.assertEqual(s["HashCheck"], {"state": "unverified", "samples": 0, "detail": "", "found": None})
        a1 = by[("a", 1)]
        self.assertEqual((a1["Endpoint"], a1["ReplayEndpoint"], a1["Type"], a1["ModelName"], a1["LoraName"], a1["TenantID"],
                          a1["BlockSize"], a1["CacheGroup"]),
                         ("tcp://127.0.0.1:2", "tcp://127.0.0.1:3", "vLLM", "rv", "l", "default", 16, 0))
        self.assertIsNone(by[("a", 0)]["CacheGroup"])
        self.assertEqual(by[("s", 0)]["Type"], "SGLang")
        self.assertEqual(by[("s", 0)]["HashProfile"]["python_hash_seed"], "0")

        view = self.c.get_global_view()
        self.assertEqual(view["ret"], OK)
        self.assertEqual(view["context_count"], len(view["contexts"]))
        ctx = [x for x in view["contexts"] if x["model_name"] == "rv"]
        self.assertEqual(len(ctx), 1)
        self.assertEqual(ctx[0]["instances"], {"a": {0, 1}})
        self.assertEqual((ctx[0]["lora_name"], ctx[0]["block_size"], ctx[0]["tenant_id"], ctx[0]["prefix_count"]), ("l", 16, "default", 0))
        self.assertEqual(ctx[0]["hash_profile"]["algorithm"], "sha256_cbor")

        self.assertEqual(self.c.unregister("a", dp_rank=1), OK)
        self.assertEqual(self.c.unregister("a", dp_rank=1), SERVICE_NOT_FOUND)
        self.assertEqual(self.c.unregister("a", tenant_id="other"), SERVICE_NOT_FOUND)
        self.assertEqual(self.c.unregister("a", tenant_id=""), OK)
        self.assertEqual(self.c.unregister("s", "default", 0), OK)
        self.assertEqual(self.c.unregister("nobody"), SERVICE_NOT_FOUND)
        self.assertEqual(self.c.unregister(5), INVALID_PARAMS)  # type: ignore[arg-type]
        self.assertEqual(self.c.unregister("a", dp_rank=-1), INVALID_PARAMS)
        self.assertEqual(self.c.list_services(), {"ret": OK, "count": 0, "services": []})

    def test_query_validation(self) -> None:
        q = self.c.query
        # nothing registered: not even the default tenant has a context
        self.assertEqual(q("nothing-here", block_size=16, token_ids=list(range(32))),
                         {"ret": OK, "hits": {}, "miss": "unknown_tenant"})
        for kw in (dict(block_size=0), dict(block_size=-16), dict(block_size=True), dict(block_size="16"),
                   dict(token_ids=[2**31]), dict(token_ids=[1.5]), dict(token_ids="abc"), dict(token_ids=None),
                   dict(tenant_id=5), dict(lora_name=1), dict(instance_filter=[]), dict(cache_salt=object())):
            args: Dict[str, Any] = dict(block_size=16, token_ids=[1, 2])
            args.update(kw)
            self.assertEqual(q("m", **args), {"ret": INVALID_PARAMS, "hits": {}}, kw)
        self.assertEqual(q("", block_size=16, token_ids=[1]), {"ret": INVALID_PARAMS, "hits": {}})
        self.assertEqual(q(None, block_size=16, token_ids=[1]), {"ret": INVALID_PARAMS, "hits": {}})  # type: ignore[arg-type]
        with self.assertRaises(TypeError):  # keyword-only arguments, as the API declares
            q("m", "", 16, "default", [1])  # type: ignore[misc]

    def test_oversized_query_is_invalid_params(self) -> None:
        # A body past the server's 16 MiB limit is answered 413
        # limit_exceeded (INVALID_PARAMS), and the connection closed while the
        # client may still be sending: the answer is read, not taken for a
        # transport failure.
        tokens = array.array("i", range(4 << 20 | 1))
        self.assertEqual(self.c.query("m", block_size=16, token_ids=tokens), {"ret": INVALID_PARAMS, "hits": {}})
        self.assertEqual(self.c.health_check(), HEALTH_OK)

    def test_registered_without_events_has_zero_rows(self) -> None:
        self.assertEqual(self.c.register(reg(instance_id="z", endpoint="tcp://127.0.0.1:7", model_name="zero")), OK)
        self.addCleanup(self.c.unregister, "z")
        zero = {"device": 0, "cpu_local": 0, "cpu_share": 0, "disk": 0}
        want = {"z": dict(zero, longest_matched=0, dp={"0": 0}, rank_matches={"0": dict(zero)})}
        for tenant in ("default", ""):
            self.assertEqual(self.c.query("zero", block_size=16, tenant_id=tenant, token_ids=list(range(64))),
                             {"ret": OK, "hits": want})


class PublisherHitTest(unittest.TestCase):
    """A real ZMQ publisher (bench/cmd/fake-engine) registered through
    register(): its BlockStored events for token ids 1000..1063 (blocks 0-1 on
    GPU, 2 on CPU, 3 on DISK) reach conductor, and query() reports them."""

    # Hand-worked from the tier rules: device covers blocks 0-1 (32 tokens),
    # cpu_local adds block 2 (48), nothing is shared (cpu_share 48), disk adds
    # block 3 (64) = longest_matched; one rank, "0".
    WANT = {
        "fake-0": {
            "longest_matched": 64,
            "dp": {"0": 32},
            "rank_matches": {"0": {"device": 32, "cpu_local": 48, "cpu_share": 48, "disk": 64}},
            "device": 32,
            "cpu_local": 48,
            "cpu_share": 48,
            "disk": 64,
        }
    }
    PROMPT = list(range(1000, 1064)) + [5, 6, 7]  # a trailing partial block is ignored under vllm_v1

    @classmethod
    def setUpClass(cls) -> None:
        cls.engine = harness.FakeEngine(["-tokens", "64", "-token-base", "1000", "-media", "GPU,GPU,CPU,DISK",
                                         "-interval", "50ms"])
        cls.c = ConductorClient()
        assert cls.c.setup(addr()) == OK
        rc = cls.c.register({
            "instance_id": "fake-0",
            "endpoint": cls.engine.info["endpoint"],
            "replay_endpoint": cls.engine.info["replay_endpoint"],
            "publisher_type": "vLLM",
            "model_name": "zmq-model",
            "block_size": 16,
            "hash_profile": dict(CBOR),
        })
        assert rc == OK, rc
        deadline = time.monotonic() + 20
        cls.first: Dict[str, Any] = {}
        while time.monotonic() < deadline:
            cls.first = cls.c.query("zmq-model", block_size=16, token_ids=cls.PROMPT)
            hit = cls.first.get("hits", {}).get("fake-0", {})
            if hit.get("longest_matched") == 64 and hit.get("device") == 32:
                break
            time.sleep(0.05)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.c.unregister("fake-0")
        cls.c.close()
        cls.engine.close()

    def test_hits_after_publish(self) -> None:
        self.assertEqual(self.first, {"ret": OK, "hits": self.WANT})
        self.assertEqual(self.c.query("zmq-model", block_size=16, token_ids=array.array("i", self.PROMPT)),
                         {"ret": OK, "hits": self.WANT})

    def test_prefixes_filters_and_salt(self) -> None:
        q = self.c.query
        r = q("zmq-model", block_size=16, token_ids=self.PROMPT[:40])  # 2 complete blocks
        self.assertEqual(r["hits"]["fake-0"]["longest_matched"], 32)
        self.assertEqual(r["hits"]["fake-0"]["dp"], {"0": 32})
        self.assertEqual(q("zmq-model", block_size=16, token_ids=self.PROMPT, instance_filter="fake-0"), {"ret": OK, "hits": self.WANT})
        self.assertEqual(q("zmq-model", block_size=16, token_ids=self.PROMPT, instance_filter="other"), {"ret": OK, "hits": {}})
        # the miss reasons HTTP gives in X-Conductor-Miss
        self.assertEqual(q("zmq-modle", block_size=16, token_ids=self.PROMPT), {"ret": OK, "hits": {}, "miss": "unknown_model"})
        self.assertEqual(q("zmq-model", block_size=32, token_ids=self.PROMPT), {"ret": OK, "hits": {}, "miss": "unknown_block_size"})
        self.assertEqual(q("zmq-model", block_size=16, lora_name="x", token_ids=self.PROMPT),
                         {"ret": OK, "hits": {}, "miss": "unknown_lora"})
        self.assertEqual(q("zmq-model", block_size=16, tenant_id="nobody", token_ids=self.PROMPT),
                         {"ret": OK, "hits": {}, "miss": "unknown_tenant"})
        salted = q("zmq-model", block_size=16, token_ids=self.PROMPT, cache_salt="s")
        self.assertEqual(salted["hits"]["fake-0"]["longest_matched"], 0)
        shifted = q("zmq-model", block_size=16, token_ids=[1] + self.PROMPT)
        self.assertEqual(shifted["hits"]["fake-0"]["longest_matched"], 0)

    def test_json_request_forms(self) -> None:
        """The port also takes Query as JSON (token_ids as an array or base64),
        as curl or another client would send it."""
        import json
        for tok in (self.PROMPT, encode_tokens(self.PROMPT).decode()):
            body = json.dumps({"model_name": "zmq-model", "block_size": 16, "token_ids": tok}).encode()
            ret, doc = self.c._call("Query", body)
            self.assertEqual((ret, doc), (OK, {"ret": OK, "hits": self.WANT}))

    def test_long_prompt(self) -> None:
        long = self.PROMPT[:64] + list(range(131072 - 64))
        self.assertEqual(self.c.query("zmq-model", block_size=16, token_ids=long), {"ret": OK, "hits": self.WANT})

    def test_one_client_many_threads(self) -> None:
        results: List[Any] = []
        lock = threading.Lock()

        def work() -> None:
            mine = [self.c.query("zmq-model", block_size=16, token_ids=self.PROMPT) for _ in range(40)]
            mine.append({"ret": self.c.health_check(), "hits": self.WANT})
            with lock:
                results.extend(mine)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(len(results), 8 * 41)
        for r in results:
            self.assertEqual(r, {"ret": OK, "hits": self.WANT})

    def test_close_while_threads_call(self) -> None:
        """close() while threads call: every call is OK, RPC_FAIL (its
        connection closed under it) or CONDUCTOR_UNAVAILABLE, and every thread
        sees CONDUCTOR_UNAVAILABLE once the client is closed."""
        c = ConductorClient()
        self.assertEqual(c.setup(addr()), OK)
        seen = set()
        last: List[int] = []
        lock = threading.Lock()
        called = threading.Barrier(5)

        def work() -> None:
            r = c.query("zmq-model", block_size=16, token_ids=self.PROMPT)["ret"]
            called.wait(30)
            deadline = time.monotonic() + 30
            while r != CONDUCTOR_UNAVAILABLE and time.monotonic() < deadline:
                with lock:
                    seen.add(r)
                r = c.query("zmq-model", block_size=16, token_ids=self.PROMPT)["ret"]
            with lock:
                last.append(r)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        called.wait(30)
        self.assertEqual(c.close(), OK)
        for t in threads:
            t.join(60)
        self.assertTrue(seen <= {OK, RPC_FAIL}, seen)
        self.assertIn(OK, seen)
        self.assertEqual(last, [CONDUCTOR_UNAVAILABLE] * 4)

    def test_async_client(self) -> None:
        async def main() -> None:
            async with AsyncConductorClient() as ac:
                self.assertEqual(await ac.health_check(), HEALTH_NOT_INITIALIZED)
                self.assertEqual(await ac.setup(addr()), OK)
                self.assertEqual(await ac.health_check(), HEALTH_OK)
                rs = await asyncio.gather(*[ac.query("zmq-model", block_size=16, token_ids=self.PROMPT) for _ in range(32)])
                for r in rs:
                    self.assertEqual(r, {"ret": OK, "hits": self.WANT})
                with self.assertRaises(ValueError):
                    await ac.register(reg(publisher_type="vllm"))
                self.assertIsNone(ac.last_error)
                with self.assertLogs("conductor_client", logging.WARNING):
                    self.assertEqual(await ac.register(reg(instance_id="async-0", endpoint="tcp://127.0.0.1:8", model_name="am",
                                                           block_size=0)), INVALID_PARAMS)
                err = ac.last_error
                assert err is not None
                self.assertEqual((err.ret, err.reason, err.field), (INVALID_PARAMS, "out_of_range", "block_size"))
                self.assertEqual(await ac.register(reg(instance_id="async-0", endpoint="tcp://127.0.0.1:8", model_name="am")), OK)
                self.assertIsNone(ac.last_error)
                svcs = await ac.list_services()
                self.assertIn("async-0", {s["InstanceID"] for s in svcs["services"]})
                view = await ac.get_global_view()
                self.assertIn({"async-0": {0}}, [x["instances"] for x in view["contexts"]])
                self.assertEqual(await ac.unregister("async-0"), OK)
                self.assertEqual(await ac.unregister("async-0"), SERVICE_NOT_FOUND)
            self.assertEqual(await ac.health_check(), HEALTH_NOT_INITIALIZED)

        asyncio.run(main())


class PackageTest(unittest.TestCase):
    def test_exports(self) -> None:
        codes = {"OK": 0, "INTERNAL_ERROR": -1, "INVALID_PARAMS": -600, "RPC_FAIL": -900, "RPC_TIMEOUT": -901,
                 "CONDUCTOR_UNAVAILABLE": -2000, "SERVICE_NOT_FOUND": -2001,
                 "HEALTH_OK": 0, "HEALTH_NOT_INITIALIZED": 1, "HEALTH_UNREACHABLE": 2}
        for name, v in codes.items():
            self.assertEqual(getattr(conductor_client, name), v, name)
        self.assertEqual(INTERNAL_ERROR, -1)


if __name__ == "__main__":
    unittest.main()

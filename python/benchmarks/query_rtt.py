"""Round-trip latency of query() from Python: the RPC port vs the HTTP msgpack /query.

Starts a conductor and a fake engine (bench/cmd/fake-engine) that publishes a
131072-token prompt (8192 blocks, vLLM sha256_cbor, B=16, all on GPU), waits
for the full hit, then times from Python, per call, with the prompt held as a
list of ints (what a router has):

  rpc            ConductorClient.query(...)  (msgpack request with an int32 bin, JSON answer)
  rpc-array      the same with the prompt already held as array('i') (no list conversion)
  msgpack-list   POST /query, msgpack.packb({... "token_ids": ids}), unpackb(answer)
  msgpack-bin    POST /query, token_ids as a msgpack bin of array('i', ids).tobytes()

for 1k, 8k and 128k-token prompts (full hits), 1 thread and 8 threads sharing
one client (RPC) or one keep-alive connection per thread (HTTP). Each call's
time includes encoding the request and decoding the answer. Prints a Markdown
table: median and p99 per call, and calls/s.

Usage (repository root): python3 python/benchmarks/query_rtt.py [--calls-scale 1.0]
Needs the msgpack package for the HTTP rows (Debian: python3-msgpack).
"""

import argparse
import array
import http.client
import os
import socket
import statistics
import sys
import threading
import time
from typing import Any, Callable, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import msgpack  # noqa: E402

from conductor_client import OK, ConductorClient  # noqa: E402
from tests import harness  # noqa: E402

MODEL = "bench-model"
BS = 16
PROMPT = 131072
SIZES = (1024, 8192, 131072)
CALLS = {1024: 4000, 8192: 2000, 131072: 200}


def pct(xs: List[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def http_conn(port: int) -> http.client.HTTPConnection:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.connect()
    assert c.sock is not None
    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return c


def msgpack_query(conn: http.client.HTTPConnection, ids: List[int], binary: bool) -> Dict[str, Any]:
    tok: Any = array.array("i", ids).tobytes() if binary else ids
    body = msgpack.packb({"model": MODEL, "block_size": BS, "token_ids": tok})
    conn.request("POST", "/query", body, {"Content-Type": "application/msgpack"})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        raise RuntimeError("HTTP %d: %r" % (resp.status, data[:200]))
    return msgpack.unpackb(data)["instances"]


def run(threads: int, calls: int, make_call: Callable[[], Callable[[], Any]]) -> List[float]:
    per = max(1, calls // threads)
    lats: List[float] = []
    lock = threading.Lock()
    barrier = threading.Barrier(threads)

    def worker() -> None:
        call = make_call()
        for _ in range(min(20, per)):  # warm-up
            call()
        barrier.wait()
        mine = []
        for _ in range(per):
            t0 = time.perf_counter()
            call()
            mine.append(time.perf_counter() - t0)
        with lock:
            lats.extend(mine)

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    lats.append(wall)  # last element: wall time, popped by the caller
    return lats


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls-scale", type=float, default=1.0)
    args = ap.parse_args()

    cond = harness.Conductor()
    engine = harness.FakeEngine(["-tokens", str(PROMPT), "-media", "GPU", "-interval", "250ms", "-repeat", "16"])
    started = time.monotonic()
    try:
        client = ConductorClient()
        assert client.setup(cond.rpc_addr) == OK
        rc = client.register({
            "instance_id": "bench-0", "endpoint": engine.info["endpoint"],
            "replay_endpoint": engine.info["replay_endpoint"], "model_name": MODEL, "block_size": BS,
            "hash_profile": {"strategy": "vllm_v1", "algorithm": "sha256_cbor", "python_hash_seed": "0",
                             "index_projection": "low64_be"},
        })
        assert rc == OK, rc
        ids = list(range(PROMPT))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            r = client.query(MODEL, block_size=BS, token_ids=ids)
            if r["hits"].get("bench-0", {}).get("device") == PROMPT:
                break
            time.sleep(0.1)
        else:
            raise SystemExit("no full hit: %r" % (r,))
        time.sleep(max(0.0, started + 16 * 0.25 + 0.5 - time.monotonic()))  # let the publisher finish
        for n in SIZES:  # both surfaces agree
            rpc_hits = client.query(MODEL, block_size=BS, token_ids=ids[:n])["hits"]
            c = http_conn(cond.http_port)
            assert rpc_hits == msgpack_query(c, ids[:n], False) == msgpack_query(c, ids[:n], True), n
            assert rpc_hits["bench-0"]["longest_matched"] == n
            c.close()

        rows = []
        for n in SIZES:
            prompt = ids[:n]
            calls = max(50, int(CALLS[n] * args.calls_scale))

            def rpc_call(tokens: Any) -> Callable[[], Callable[[], Any]]:
                def make() -> Callable[[], Any]:
                    def f() -> Any:
                        r = client.query(MODEL, block_size=BS, token_ids=tokens)
                        if r["ret"] != OK:
                            raise RuntimeError(r)
                    return f
                return make

            def mp_call(binary: bool) -> Callable[[], Callable[[], Any]]:
                def make() -> Callable[[], Any]:
                    conn = http_conn(cond.http_port)
                    return lambda: msgpack_query(conn, prompt, binary)
                return make

            for name, make in (("rpc", rpc_call(prompt)), ("rpc-array", rpc_call(array.array("i", prompt))), ("msgpack-list", mp_call(False)), ("msgpack-bin", mp_call(True))):
                for th in (1, 8):
                    lats = run(th, calls, make)
                    wall = lats.pop()
                    rows.append((n, name, th, len(lats), statistics.median(lats) * 1e6, pct(lats, 99) * 1e6, len(lats) / wall))
                    print("%7d %-13s %d thr  n=%5d  median %8.0f us  p99 %8.0f us  %7.0f calls/s" % rows[-1], file=sys.stderr)
        print("| tokens | route | threads | calls | median µs | p99 µs | calls/s |")
        print("|---:|---|---:|---:|---:|---:|---:|")
        for r in rows:
            print("| %d | %s | %d | %d | %.0f | %.0f | %.0f |" % r)
        client.close()
    finally:
        engine.close()
        cond.close()
        harness.cleanup_builds()


if __name__ == "__main__":
    main()

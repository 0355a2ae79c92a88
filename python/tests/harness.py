"""Test harness: build (or find) the conductor and fake-engine binaries and run
them as real processes on free loopback ports.

Binaries: $CONDUCTOR_BIN and $FAKE_ENGINE_BIN when set (the Makefile sets them
to what it built); otherwise they are built once per test run with
``go build`` from the repository root into a temporary directory.
"""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_build_lock = threading.Lock()
_built: Dict[str, str] = {}
_build_dir: Optional[str] = None


def binary(name: str) -> str:
    """Path of the conductor or fake-engine binary."""
    env = {"conductor": "CONDUCTOR_BIN", "fake-engine": "FAKE_ENGINE_BIN"}[name]
    if os.environ.get(env):
        return os.environ[env]
    pkg = {"conductor": "./cmd/conductor", "fake-engine": "./bench/cmd/fake-engine"}[name]
    global _build_dir
    with _build_lock:
        if name not in _built:
            if _build_dir is None:
                _build_dir = tempfile.mkdtemp(prefix="conductor-pytest-")
            out = os.path.join(_build_dir, name)
            subprocess.run(["go", "build", "-o", out, pkg], cwd=REPO, check=True, timeout=600)
            _built[name] = out
        return _built[name]


def cleanup_builds() -> None:
    global _build_dir
    if _build_dir is not None:
        shutil.rmtree(_build_dir, ignore_errors=True)
        _build_dir = None
        _built.clear()


def free_port() -> int:
    """A loopback port that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _wait_port(port: int, proc: "subprocess.Popen[bytes]", deadline: float) -> bool:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.02)
    return False


class Conductor:
    """A conductor process with the seed's configuration shape:
    {"http_server_port", "rpc_server_port", "kvevent_instance": {}}."""

    def __init__(self, rpc_port: Optional[int] = None, http_port: Optional[int] = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="conductor-run-")
        self.proc: Optional["subprocess.Popen[bytes]"] = None
        last = ""
        for _ in range(3):  # a chosen free port can be taken before we bind it
            self.rpc_port = rpc_port or free_port()
            self.http_port = http_port or free_port()
            cfg = os.path.join(self.dir, "conductor.json")
            with open(cfg, "w") as f:
                json.dump({"http_server_port": self.http_port, "rpc_server_port": self.rpc_port, "kvevent_instance": {}}, f)
            self.log = open(os.path.join(self.dir, "conductor.log"), "w+b")
            env = dict(os.environ, CONDUCTOR_CONFIG_PATH=cfg)
            self.proc = subprocess.Popen(
                # durable registrations in the run's own directory, not the user's
                [binary("conductor"), "--listen", "127.0.0.1", "--state-dir", os.path.join(self.dir, "state")],
                env=env,
                stdout=self.log,
                stderr=subprocess.STDOUT,
            )
            deadline = time.monotonic() + 15
            if _wait_port(self.rpc_port, self.proc, deadline) and _wait_port(self.http_port, self.proc, deadline):
                return
            last = self.logs()
            self.stop()
            if rpc_port:
                break
        raise RuntimeError("conductor did not start:\n" + last)

    @property
    def rpc_addr(self) -> str:
        return "127.0.0.1:%d" % self.rpc_port

    def logs(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def close(self) -> None:
        self.stop()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class FakeEngine:
    """bench/cmd/fake-engine: a vLLM publisher (PUB + ROUTER replay) that keeps
    publishing BlockStored events for token ids base..base+tokens-1."""

    def __init__(self, args: List[str]) -> None:
        self.proc = subprocess.Popen(
            [binary("fake-engine")] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read().decode() if self.proc.stderr else ""
            raise RuntimeError("fake-engine did not start: " + err)
        self.info: Dict[str, Any] = json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()

"""The package as pip builds and installs it: buildsys/backend.py, the
standard-library build backend pyproject.toml names, and the documented
``pip install ./python`` in a fresh virtual environment with no package
index."""

import base64
import hashlib
import os
import subprocess
import sys
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
sys.path.insert(0, os.path.join(HERE, "buildsys"))
import backend  # noqa: E402

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None  # type: ignore[assignment]


class BackendTest(unittest.TestCase):
    def test_reader_reads_the_project_table(self) -> None:
        with open(os.path.join(HERE, "pyproject.toml"), encoding="utf-8") as f:
            text = f.read()
        got = backend.read_project(text)
        # written out by hand from pyproject.toml
        self.assertEqual(got["name"], "conductor-client")
        self.assertEqual(got["license"], {"text": "Apache-2.0"})
        self.assertEqual(got["dependencies"], [])
        self.assertEqual(got["classifiers"], ["Programming Language :: Python :: 3", "Typing :: Typed"])
        if tomllib is not None:  # the second reader, where Python has one
            self.assertEqual(got, tomllib.loads(text)["project"])
        with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
            self.assertIn(b'requires = []', f.read())  # nothing to download to build

    def test_wheel(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            name = backend.build_wheel(d)
            self.assertEqual(name, "conductor_client-0.1.0-py3-none-any.whl")
            with zipfile.ZipFile(os.path.join(d, name)) as z:
                names = set(z.namelist())
                pkg = {n for n in names if n.startswith("conductor_client/")}
                want = {"conductor_client/" + f for f in os.listdir(os.path.join(HERE, "conductor_client"))
                        if f.endswith(".py") or f == "py.typed"}
                self.assertEqual(pkg, want)
                info = "conductor_client-0.1.0.dist-info/"
                self.assertTrue({info + "METADATA", info + "WHEEL", info + "RECORD", info + "LICENSE"} <= names, names)
                with open(os.path.join(os.path.dirname(HERE), "LICENSE"), "rb") as f:
                    self.assertEqual(z.read(info + "LICENSE"), f.read())
                meta = z.read(info + "METADATA").decode()
                for line in ("Name: conductor-client", "Version: 0.1.0", "License: Apache-2.0", "Requires-Python: >=3.9"):
                    self.assertIn(line + "\n", meta)
                # RECORD: every member, each hash and size right
                rows = [r.split(",") for r in z.read(info + "RECORD").decode().splitlines()]
                self.assertEqual({r[0] for r in rows}, names)
                for path, digest, size in rows:
                    if path == info + "RECORD":
                        self.assertEqual((digest, size), ("", ""))
                        continue
                    data = z.read(path)
                    want_digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                    self.assertEqual((digest, int(size)), ("sha256=" + want_digest, len(data)), path)


class InstallTest(unittest.TestCase):
    def test_pip_install_offline_in_a_fresh_venv(self) -> None:
        # The documented command, with --no-index: pip may use no package
        # index at all.
        with tempfile.TemporaryDirectory() as d:
            venv = os.path.join(d, "venv")
            subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=300)
            py = os.path.join(venv, "bin", "python")
            out = subprocess.run([py, "-m", "pip", "install", "--no-index", "--no-cache-dir", "--disable-pip-version-check", HERE],
                                 capture_output=True, text=True, timeout=300)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            got = subprocess.run(
                [py, "-c", "import conductor_client, importlib.metadata as m; "
                           "print(conductor_client.__file__); print(m.version('conductor-client')); "
                           "print(conductor_client.ConductorClient().health_check())"],
                cwd=d, capture_output=True, text=True, timeout=60, check=True).stdout.split()
            self.assertTrue(got[0].startswith(os.path.join(venv, "lib")), got)
            self.assertEqual(got[1:], ["0.1.0", "1"])  # HEALTH_NOT_INITIALIZED before setup()


if __name__ == "__main__":
    unittest.main()

"""The PEP 517 build backend of conductor-client: standard library only.

pyproject.toml names this module (backend-path) and no build requirement, so
``pip install ./python`` builds the wheel here, with nothing to download: it
works with no package index, on any Python >= 3.9 with pip, in a fresh
virtual environment included (``make python-test`` proves it). The project's
metadata is pyproject.toml's [project] table (read with tomllib where Python
has it, else with the small reader below, which knows exactly the forms that
table uses; tests/test_package.py checks the two agree).

Hooks: build_wheel, build_sdist, build_editable (``pip install -e``), and the
get_requires_* hooks, which require nothing.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "conductor_client"
# A fixed time for archive members (zip's earliest), so builds are reproducible.
_EPOCH = (1980, 1, 1, 0, 0, 0)


def read_project(text: str) -> Dict[str, Any]:
    """pyproject.toml's [project] table, by the reader below (the forms it
    uses: strings, arrays of strings, inline tables of strings)."""
    project: Dict[str, Any] = {}
    table = ""
    lines = iter(text.splitlines())
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"\[([^\]]+)\]", line)
        if m:
            table = m.group(1).strip()
            continue
        if table != "project":
            continue
        key, _, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if value.startswith("[") and not value.endswith("]"):
            for more in lines:
                value += " " + more.strip()
                if more.strip().endswith("]"):
                    break
        project[key] = _value(value)
    return project


def _value(v: str) -> Any:
    if v.startswith('"'):
        return _string(v)
    if v.startswith("["):
        return [_string(s.strip()) for s in re.findall(r'"(?:[^"\\]|\\.)*"', v)]
    if v.startswith("{"):
        return {k: _string(s) for k, s in re.findall(r'(\w+)\s*=\s*("(?:[^"\\]|\\.)*")', v)}
    raise ValueError("pyproject.toml: unsupported value %r" % v)


def _string(s: str) -> str:
    if len(s) < 2 or s[0] != '"' or s[-1] != '"':
        raise ValueError("pyproject.toml: not a basic string: %r" % s)
    return s[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")


def project() -> Dict[str, Any]:
    """The [project] table of pyproject.toml."""
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    try:
        import tomllib  # Python >= 3.11
    except ImportError:
        return read_project(text)
    return dict(tomllib.loads(text)["project"])


def _names() -> Tuple[Dict[str, Any], str]:
    p = project()
    dist = re.sub(r"[-_.]+", "_", p["name"]).lower() + "-" + p["version"]
    return p, dist


def metadata() -> str:
    """The core metadata (METADATA, PKG-INFO) of the distribution."""
    p, _ = _names()
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + p["version"]]
    if p.get("description"):
        lines.append("Summary: " + p["description"])
    lic = p.get("license")
    if isinstance(lic, dict) and lic.get("text"):
        lines.append("License: " + lic["text"])
    if p.get("requires-python"):
        lines.append("Requires-Python: " + p["requires-python"])
    for dep in p.get("dependencies", []):
        lines.append("Requires-Dist: " + dep)
    for c in p.get("classifiers", []):
        lines.append("Classifier: " + c)
    text = "\n".join(lines) + "\n"
    readme = p.get("readme")
    if readme:
        with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
            text += "Description-Content-Type: text/markdown\n\n" + f.read()
    return text


def _package_files() -> List[Tuple[str, str]]:
    """(path in the archive, path on disk) of the package's files."""
    out = []
    base = os.path.join(ROOT, PACKAGE)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            disk = os.path.join(dirpath, name)
            out.append((os.path.relpath(disk, ROOT).replace(os.sep, "/"), disk))
    return out


def _license() -> Optional[str]:
    """The LICENSE file: the repository's, or an sdist's own."""
    for path in (os.path.join(ROOT, "LICENSE"), os.path.join(os.path.dirname(ROOT), "LICENSE")):
        if os.path.exists(path):
            return path
    return None


def _write_wheel(wheel_directory: str, members: List[Tuple[str, bytes]]) -> str:
    p, dist = _names()
    info = dist + ".dist-info"
    members = list(members)
    members.append((info + "/METADATA", metadata().encode("utf-8")))
    members.append((info + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: conductor-client buildsys\nRoot-Is-Purelib: true\nTag: py3-none-any\n"))
    lic = _license()
    if lic:
        with open(lic, "rb") as f:
            members.append((info + "/LICENSE", f.read()))
    record = []
    for name, data in members:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
        record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
    record.append(info + "/RECORD,,")
    members.append((info + "/RECORD", ("\n".join(record) + "\n").encode("utf-8")))
    filename = dist + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members:
            zi = zipfile.ZipInfo(name, _EPOCH)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return filename


def build_wheel(wheel_directory: str, config_settings: Any = None, metadata_directory: Any = None) -> str:
    members = []
    for name, disk in _package_files():
        with open(disk, "rb") as f:
            members.append((name, f.read()))
    return _write_wheel(wheel_directory, members)


def build_editable(wheel_directory: str, config_settings: Any = None, metadata_directory: Any = None) -> str:
    # A .pth file puts the checkout's python/ on sys.path: edits take effect.
    return _write_wheel(wheel_directory, [(PACKAGE + ".pth", (ROOT + "\n").encode("utf-8"))])


def build_sdist(sdist_directory: str, config_settings: Any = None) -> str:
    _, dist = _names()
    filename = dist + ".tar.gz"
    files = [("pyproject.toml", os.path.join(ROOT, "pyproject.toml")), ("README.md", os.path.join(ROOT, "README.md")),
             ("buildsys/backend.py", os.path.abspath(__file__))] + _package_files()
    lic = _license()
    if lic:
        files.append(("LICENSE", lic))
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as t:
        def add(name: str, data: bytes) -> None:
            ti = tarfile.TarInfo(dist + "/" + name)
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 315532800
            t.addfile(ti, io.BytesIO(data))
        add("PKG-INFO", metadata().encode("utf-8"))
        for name, disk in files:
            with open(disk, "rb") as f:
                add(name, f.read())
    return filename


def get_requires_for_build_wheel(config_settings: Any = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Any = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Any = None) -> List[str]:
    return []

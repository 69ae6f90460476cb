"""redlockd_build: the PEP 517 build backend of redlockd-client, standard
library only, so that ``pip install ./clients/python`` needs nothing from a
package index, with or without build isolation.

It builds a pure-Python wheel (py3-none-any) of src/redlockd_client with a
.dist-info (METADATA from pyproject.toml's [project] and README.md, WHEEL,
RECORD), an sdist, and an editable wheel (PEP 660: a .pth file naming src/).
Archives are reproducible: every entry has the time SOURCE_DATE_EPOCH, or
1980-01-01. By hand, ``python3 build_backend/redlockd_build.py [DIR]`` writes
the wheel and the sdist to DIR (default dist/).
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import io
import os
import re
import sys
import tarfile
import time
import zipfile
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "redlockd_client"
TAG = "py3-none-any"


# ---------------------------------------------------------------------------
# pyproject.toml

def read_project(path: Optional[str] = None, use_tomllib: bool = True) -> Dict[str, Any]:
    """The [project] table of pyproject.toml: with tomllib (Python 3.11+),
    else with parse_project, which reads the subset this file uses."""
    with open(path or os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        raw = f.read()
    if use_tomllib:
        try:
            tomllib = importlib.import_module("tomllib")
        except ImportError:
            pass
        else:
            return dict(tomllib.loads(raw.decode())["project"])
    return parse_project(raw.decode())


_STRING = r'"(?:[^"\\]|\\.)*"'


def parse_project(text: str) -> Dict[str, Any]:
    """The [project] table of a TOML text whose values are basic strings,
    arrays of them (on one line or several) and inline tables of strings."""
    project: Dict[str, Any] = {}
    table = ""
    lines = iter(text.splitlines())
    for line in lines:
        line = _strip_comment(line)
        if not line:
            continue
        m = re.fullmatch(r"\[\s*([A-Za-z0-9_.-]+)\s*\]", line)
        if m:
            table = m.group(1)
            continue
        key, sep, value = line.partition("=")
        if table != "project" or not sep:
            continue
        value = value.strip()
        while value.startswith("[") and not value.endswith("]"):
            value += " " + _strip_comment(next(lines))
        project[key.strip()] = _value(value)
    return project


def _strip_comment(line: str) -> str:
    out, quoted = [], False
    for i, c in enumerate(line):
        if c == '"' and (i == 0 or line[i - 1] != "\\"):
            quoted = not quoted
        elif c == "#" and not quoted:
            break
        out.append(c)
    return "".join(out).strip()


def _value(v: str) -> Any:
    if v.startswith('"'):
        return _unquote(v)
    if v.startswith("["):
        return [_unquote(s) for s in re.findall(_STRING, v)]
    if v.startswith("{"):
        return {k: _unquote(s) for k, s in re.findall(r"([A-Za-z0-9_-]+)\s*=\s*(" + _STRING + ")", v)}
    raise ValueError(f"pyproject.toml: a value redlockd_build cannot read: {v}")


def _unquote(s: str) -> str:
    return s[1:-1].encode().decode("unicode_escape")


# ---------------------------------------------------------------------------
# metadata

def _names() -> Tuple[str, str]:
    """(distribution name as in file names, version)."""
    p = read_project()
    return re.sub(r"[-_.]+", "_", p["name"]).lower(), p["version"]


def metadata() -> str:
    """The METADATA (core metadata 2.1) of the distribution."""
    p = read_project()
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}"]
    if p.get("description"):
        lines.append(f"Summary: {p['description']}")
    if p.get("requires-python"):
        lines.append(f"Requires-Python: {p['requires-python']}")
    lic = p.get("license")
    if isinstance(lic, dict) and lic.get("text"):
        lines.append(f"License: {lic['text']}")
    lines += [f"Classifier: {c}" for c in p.get("classifiers", [])]
    lines += [f"Requires-Dist: {d}" for d in p.get("dependencies", [])]
    for label, url in (p.get("urls") or {}).items():
        lines.append(f"Project-URL: {label}, {url}")
    readme = os.path.join(ROOT, "README.md")
    body = ""
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            body = f.read()
    return "\n".join(lines) + "\n\n" + body


def _wheel_file() -> str:
    return f"Wheel-Version: 1.0\nGenerator: redlockd_build\nRoot-Is-Purelib: true\nTag: {TAG}\n"


def _package_files() -> List[Tuple[str, str]]:
    """(path in the wheel, path on disk) of every file of the package."""
    src = os.path.join(ROOT, "src")
    out = []
    for d, dirs, files in os.walk(os.path.join(src, PACKAGE)):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for f in sorted(files):
            if not f.endswith((".pyc", ".pyo")):
                full = os.path.join(d, f)
                out.append((os.path.relpath(full, src).replace(os.sep, "/"), full))
    return out


# ---------------------------------------------------------------------------
# archives

def _epoch() -> int:
    return max(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")), 315532800)


def _write_wheel(directory: str, entries: List[Tuple[str, bytes]]) -> str:
    """Writes the wheel of entries plus its .dist-info; returns its file name."""
    name, version = _names()
    info = f"{name}-{version}.dist-info"
    entries = entries + [(f"{info}/METADATA", metadata().encode()), (f"{info}/WHEEL", _wheel_file().encode())]
    record = [f"{path},sha256={_digest(data)},{len(data)}" for path, data in entries]
    record.append(f"{info}/RECORD,,")
    entries.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    wheel = f"{name}-{version}-{TAG}.whl"
    os.makedirs(directory, exist_ok=True)
    stamp = time.gmtime(_epoch())[:6]
    with zipfile.ZipFile(os.path.join(directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in entries:
            zi = zipfile.ZipInfo(path, date_time=stamp)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return wheel


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# ---------------------------------------------------------------------------
# PEP 517 and PEP 660 hooks

def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: Optional[Dict[str, Any]] = None) -> str:
    name, version = _names()
    info = f"{name}-{version}.dist-info"
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    for file, text in (("METADATA", metadata()), ("WHEEL", _wheel_file())):
        with open(os.path.join(metadata_directory, info, file), "w", encoding="utf-8") as f:
            f.write(text)
    return info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    return _write_wheel(wheel_directory, [(path, _read(full)) for path, full in _package_files()])


def build_editable(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                   metadata_directory: Optional[str] = None) -> str:
    pth = os.path.join(ROOT, "src") + "\n"
    return _write_wheel(wheel_directory, [(f"__editable__.{PACKAGE}.pth", pth.encode())])


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    name, version = _names()
    base = f"{name}-{version}"
    files = [(os.path.relpath(full, ROOT), full) for _, full in _package_files()]
    files += [(f, os.path.join(ROOT, f)) for f in ("pyproject.toml", "README.md", "build_backend/redlockd_build.py")
              if os.path.exists(os.path.join(ROOT, f))]
    os.makedirs(sdist_directory, exist_ok=True)
    sdist = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, sdist), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for path, data in [(p, _read(full)) for p, full in files] + [("PKG-INFO", metadata().encode())]:
            ti = tarfile.TarInfo(f"{base}/{path}")
            ti.size, ti.mtime, ti.mode = len(data), _epoch(), 0o644
            tar.addfile(ti, io.BytesIO(data))
    return sdist


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "dist")
    for built in (build_wheel(out), build_sdist(out)):
        print(os.path.join(out, built))

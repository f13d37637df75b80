"""Where the training text comes from: the built-in corpora and the user's own files.

Every source yields a list of documents (str). A document is the unit that gets a separator
token between it and the next one (see tokenizer.py), so a book, a quote or a file each stay
one piece of text.

Built-in corpora come from Debian packages, fetched with `apt-get download` and unpacked with
`dpkg-deb -x` into a cache folder (never installed, so no R and no games menu get pulled in):

- janeausten (r-cran-janeaustenr): Jane Austen's six novels, public domain. The package keeps
  them as an R "lazy-load database": data/Rdata.rdx is a gzip'd R serialization of the index
  (list(variables = list(name = c(offset, length)), ...)) and data/Rdata.rdb holds one record
  per variable at that offset: a 4-byte big-endian uncompressed length, then a zlib stream
  holding the R serialization of a character vector with one element per line of the book.
  read_r_serialized() below reads the subset of R's XDR serialization format (version 2 and
  3) that these files use, and rejects anything else with a clear error.
- fortunes (fortunes + fortunes-min): the classic fortune(6) quote files, each quote a
  document (files are separated by lines holding a single '%').
"""

import gzip
import os
import shutil
import struct
import subprocess
import sys
import zlib

JANEAUSTEN_DATA = "usr/lib/R/site-library/janeaustenr/data"
FORTUNES_DIR = "usr/share/games/fortunes"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------
# Debian packages, downloaded but not installed


def downloaded_debs(cache_dir, package):
    return sorted(
        f for f in os.listdir(cache_dir) if f.startswith(package + "_") and f.endswith(".deb")
    )


def apt_get(args, cwd):
    try:
        return subprocess.run(["apt-get", *args], cwd=cwd, capture_output=True, text=True)
    except FileNotFoundError:
        raise RuntimeError(
            "apt-get is not available: the built-in corpora come from Debian packages; "
            "use --input with your own text instead"
        ) from None


def fetch_debian_package(package, cache_dir):
    """Downloads a .deb with apt-get and unpacks it under cache_dir/PACKAGE; returns that root.
    A package unpacked before is reused (the folder is only created after a complete unpack).
    When apt-get does not know the package yet (a fresh machine whose package lists were never
    fetched) and we are root, `apt-get update` runs once and the download is retried."""
    root = os.path.join(cache_dir, package)
    if os.path.isdir(root):
        return root
    os.makedirs(cache_dir, exist_ok=True)
    if not downloaded_debs(cache_dir, package):
        log(f"downloading Debian package {package} into {cache_dir} (apt-get download)")
        proc = apt_get(["download", package], cache_dir)
        if proc.returncode != 0 and os.geteuid() == 0:
            log("apt-get does not find it: running apt-get update, then trying again")
            apt_get(["update", "-qq"], cache_dir)
            proc = apt_get(["download", package], cache_dir)
        if proc.returncode != 0 or not downloaded_debs(cache_dir, package):
            raise RuntimeError(
                f"`apt-get download {package}` failed (exit {proc.returncode}): "
                f"{proc.stderr.strip()}\nIf apt-get cannot locate the package, run "
                f"`sudo apt-get update` and try again."
            )
    deb = downloaded_debs(cache_dir, package)[-1]
    tmp = root + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    proc = subprocess.run(
        ["dpkg-deb", "-x", os.path.join(cache_dir, deb), tmp], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"dpkg-deb -x failed on {deb}: {proc.stderr.strip()}")
    os.rename(tmp, root)
    return root


# ----------------------------------------------------------------------------------------------
# R serialization (XDR format, versions 2 and 3), the subset that data packages use

SYMSXP, LISTSXP, CHARSXP, LGLSXP = 1, 2, 9, 10
INTSXP, REALSXP, STRSXP, VECSXP = 13, 14, 16, 19
REFSXP, NILVALUE_SXP = 255, 254
# Flag bits of an item header: low byte = type, bit 9 = has attributes, bit 10 = has a tag,
# and in bits 12 and up the CHARSXP encoding "levels" (latin-1 = 4; utf-8 and ascii read as UTF-8).
HAS_ATTR_BIT, HAS_TAG_BIT = 1 << 9, 1 << 10
LATIN1_MASK = 1 << 2


class RReader:
    """Reads one R-serialized object from bytes. Vectors become Python lists (a character
    vector: a list of str, None for NA); a vector with a 'names' attribute becomes a dict from
    name to element. Other attributes are read and dropped."""

    def __init__(self, data, where):
        self.data, self.pos, self.where, self.refs = data, 0, where, []

    def fail(self, msg):
        raise ValueError(f"{self.where}: {msg} (at byte {self.pos} of the R serialization)")

    def take(self, n):
        if self.pos + n > len(self.data):
            self.fail(f"truncated: needs {n} more bytes, {len(self.data) - self.pos} left")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int32(self):
        return struct.unpack(">i", self.take(4))[0]

    def length(self):
        n = self.int32()
        if n == -1:  # long vector: two more int32, upper and lower half
            hi, lo = struct.unpack(">II", self.take(8))
            n = (hi << 32) | lo
        if n < 0:
            self.fail(f"negative length {n}")
        return n

    def header(self):
        if self.take(2) != b"X\n":
            self.fail("not an XDR R serialization (expected the 'X\\n' header)")
        version = self.int32()
        self.int32()  # R version that wrote it
        self.int32()  # oldest R version that can read it
        if version == 3:
            self.take(self.int32())  # native encoding name, e.g. "UTF-8"
        elif version != 2:
            self.fail(f"unsupported R serialization version {version} (2 and 3 are known)")

    def item(self):
        flags = self.int32()
        kind = flags & 0xFF
        if kind == NILVALUE_SXP:
            return None
        if kind == REFSXP:
            index = flags >> 8 or self.int32()
            if not 1 <= index <= len(self.refs):
                self.fail(f"reference {index} to an unknown symbol")
            return self.refs[index - 1]
        if kind == SYMSXP:
            name = self.item()
            self.refs.append(name)
            return name
        if kind == CHARSXP:
            n = self.int32()
            if n == -1:
                return None  # NA_character_
            raw = self.take(n)
            return raw.decode("latin-1" if (flags >> 12) & LATIN1_MASK else "utf-8")
        if kind == LISTSXP:  # pairlist (how attributes are stored): attr, tag, car, then cdr
            if flags & HAS_ATTR_BIT:
                self.item()
            tag = self.item() if flags & HAS_TAG_BIT else None
            value = self.item()
            return [(tag, value)] + (self.item() or [])
        if kind in (LGLSXP, INTSXP):
            n = self.length()
            value = list(struct.unpack(f">{n}i", self.take(4 * n)))
        elif kind == REALSXP:
            n = self.length()
            value = list(struct.unpack(f">{n}d", self.take(8 * n)))
        elif kind in (STRSXP, VECSXP):
            value = [self.item() for _ in range(self.length())]
        else:
            self.fail(f"unsupported R object type {kind} (flags 0x{flags:x})")
        if flags & HAS_ATTR_BIT:
            names = dict(self.item() or []).get("names")
            if names is not None:
                if len(names) != len(value):
                    self.fail(f"{len(names)} names for a vector of length {len(value)}")
                value = dict(zip(names, value))
        return value


def read_r_serialized(data, where):
    """Parses bytes holding exactly one XDR R serialization and returns the object."""
    reader = RReader(data, where)
    reader.header()
    value = reader.item()
    if reader.pos != len(data):
        reader.fail(f"{len(data) - reader.pos} unexpected bytes after the object")
    return value


def read_lazyload_db(data_dir, name="Rdata"):
    """Reads an R lazy-load database (NAME.rdx index + NAME.rdb records). Returns a dict from
    variable name to its value, in index order."""
    rdx_path, rdb_path = os.path.join(data_dir, name + ".rdx"), os.path.join(
        data_dir, name + ".rdb"
    )
    with open(rdx_path, "rb") as f:
        index = read_r_serialized(gzip.decompress(f.read()), rdx_path)
    if not isinstance(index, dict) or not isinstance(index.get("variables"), dict):
        raise ValueError(f"{rdx_path}: not a lazy-load index (no named 'variables' list)")
    with open(rdb_path, "rb") as f:
        rdb = f.read()
    out = {}
    for var, where in index["variables"].items():
        if len(where) != 2:
            raise ValueError(f"{rdx_path}: entry {var!r} is not (offset, length)")
        offset, size = int(where[0]), int(where[1])
        if offset < 0 or size < 4 or offset + size > len(rdb):
            raise ValueError(
                f"{rdb_path}: record {var!r} at {offset}+{size} lies outside the "
                f"file ({len(rdb)} bytes): truncated?"
            )
        record = rdb[offset : offset + size]
        expected = struct.unpack(">I", record[:4])[0]
        try:
            raw = zlib.decompress(record[4:])
        except zlib.error as e:
            raise ValueError(f"{rdb_path}: record {var!r} is not a zlib stream ({e})") from None
        if len(raw) != expected:
            raise ValueError(
                f"{rdb_path}: record {var!r} inflates to {len(raw)} bytes, its "
                f"header says {expected}"
            )
        out[var] = read_r_serialized(raw, f"{rdb_path} record {var!r}")
    return out


# ----------------------------------------------------------------------------------------------
# The corpora


def janeausten_documents(cache_dir):
    """The six novels, one document each: the lines joined with newlines, a final newline."""
    root = fetch_debian_package("r-cran-janeaustenr", cache_dir)
    books = read_lazyload_db(os.path.join(root, JANEAUSTEN_DATA))
    docs = []
    for name, lines in books.items():
        if not isinstance(lines, list) or not all(isinstance(s, str) for s in lines):
            raise ValueError(f"janeaustenr: {name!r} is not a character vector")
        docs.append("\n".join(lines) + "\n")
    return docs


def fortunes_documents(cache_dir):
    """Every quote of the fortune files (plain text, quotes separated by a line '%')."""
    files = []
    for package in ("fortunes-min", "fortunes"):
        folder = os.path.join(fetch_debian_package(package, cache_dir), FORTUNES_DIR)
        files += [
            os.path.join(folder, f)
            for f in sorted(os.listdir(folder))
            if os.path.isfile(os.path.join(folder, f)) and "." not in f
        ]
    docs = []
    for path in files:
        text = read_text_file(path)
        docs += [q.strip("\n") + "\n" for q in text.split("\n%\n") if q.strip()]
    return docs


def read_text_file(path):
    """A file's text as UTF-8; invalid bytes become U+FFFD with a warning."""
    with open(path, "rb") as f:
        raw = f.read()
    text = raw.decode("utf-8", errors="replace")
    if "\ufffd" in text and "\ufffd".encode() not in raw:
        log(f"warning: {path} is not valid UTF-8; invalid bytes replaced by U+FFFD")
    return text


def path_documents(path):
    """A text file is one document; a folder gives one document per file under it (recursive,
    sorted by path, hidden files skipped)."""
    if os.path.isfile(path):
        return [read_text_file(path)]
    if not os.path.isdir(path):
        raise FileNotFoundError(f"--input {path}: no such file or folder")
    paths = []
    for folder, subdirs, names in os.walk(path):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        paths += [os.path.join(folder, n) for n in names if not n.startswith(".")]
    paths.sort()
    if not paths:
        raise ValueError(f"--input {path}: the folder holds no files")
    return [read_text_file(p) for p in paths]

"""A damaged store file as pages, made readable: padded, its write-ahead log applied, its header rebuilt.

What :mod:`.salvage` (and SQLite, on the doctor's working copy) reads instead of the file itself: the
file is only ever read. The copy is padded with empty pages to a whole number of pages and to the page
count its header records; a log beside the file is applied frame by frame up to its last valid commit;
the 100-byte header is written anew from what can be trusted in it (the page size is guessed from the
pages themselves when the header is garbage), in rollback mode, so SQLite opens it as an ordinary file.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

MAGIC = b"SQLite format 3\x00"
PAGE_SIZES = (4096, 1024, 2048, 8192, 16384, 32768, 65536, 512)
TABLE_LEAF, TABLE_INTERIOR, INDEX_LEAF, INDEX_INTERIOR = 13, 5, 10, 2
MAX_PAGES = 1 << 31


class Garbage(ValueError):
    """A page, cell or record that does not parse."""


@dataclass
class Image:
    """A store file's pages (1-based), padded; what the header said and what had to be repaired."""

    data: bytearray
    page_size: int
    reserved: int
    notes: list[str] = field(default_factory=list)

    @property
    def pages(self) -> int:
        return len(self.data) // self.page_size

    @property
    def usable(self) -> int:
        return self.page_size - self.reserved

    def page(self, n: int) -> bytes:
        if not 1 <= n <= self.pages:
            raise Garbage(f"page {n} is outside the file")
        return bytes(self.data[(n - 1) * self.page_size:n * self.page_size])


def read_image(path: str | os.PathLike) -> Image:
    """The store at ``path`` as pages: padded, with its write-ahead log applied and a sound header."""
    data = bytearray(Path(path).read_bytes())
    header_ok = data[:16] == MAGIC
    size = _header_page_size(data) if header_ok else None
    notes = []
    if size is None:
        size = guess_page_size(data)
        notes.append(f"the file's header is damaged{'' if header_ok else ' (it does not start as an SQLite file)'}: "
                     f"read with {size}-byte pages, the size its pages show")
        header_ok = False
    reserved = data[20] if header_ok and data[20] < 64 else 0
    recorded = int.from_bytes(data[28:32], "big") if header_ok else 0
    length = len(data)
    whole = -(-length // size)
    want = max(whole, recorded if 0 < recorded < MAX_PAGES and recorded <= whole * 2 + 16 else 0)
    if length % size or want > whole:
        notes.append(f"the file is {length:,} bytes, {'not a whole number of pages' if length % size else ''}"
                     f"{' and ' if length % size and want > whole else ''}"
                     f"{f'short of the {want:,} pages its header records' if want > whole else ''}: read as "
                     f"{want:,} pages of {size} bytes, the missing part empty")
    data.extend(bytes(want * size - length))
    image = Image(data, size, reserved, notes)
    applied = _apply_wal(image, Path(f"{path}-wal"))
    if applied:
        image.notes.append(f"applied {applied} page(s) from its write-ahead log")
    _write_header(image, keep=header_ok)
    return image


def write_copy(image: Image, target: str | os.PathLike) -> Path:
    Path(target).write_bytes(bytes(image.data))
    return Path(target)


def _header_page_size(data: bytes) -> int | None:
    if len(data) < 100:
        return None
    raw = int.from_bytes(data[16:18], "big")
    size = 65536 if raw == 1 else raw
    if size not in PAGE_SIZES or data[21:24] != b"\x40\x20\x20" or data[18] not in (1, 2) or data[19] not in (1, 2):
        return None
    return size


def guess_page_size(data: bytes) -> int:
    """The page size under which the pages look like b-tree pages. A multiple of the true size looks as good
    (its page starts are page starts too), a fraction of it does not: so the smallest size that scores
    close to the best."""
    scores = {}
    for size in sorted(PAGE_SIZES):
        count = len(data) // size
        if count < 1:
            continue
        sample = range(1, count + 1) if count <= 4096 else range(1, count + 1, count // 4096 + 1)
        scores[size] = sum(_looks_like_btree(data, n, size) for n in sample) / len(sample)
    if not scores or max(scores.values()) == 0:
        return PAGE_SIZES[0]
    best = max(scores.values())
    return min(size for size, score in scores.items() if score >= 0.8 * best)


def _looks_like_btree(data: bytes, n: int, size: int) -> bool:
    at = (n - 1) * size + (100 if n == 1 else 0)
    kind = data[at]
    if kind not in (TABLE_LEAF, TABLE_INTERIOR, INDEX_LEAF, INDEX_INTERIOR):
        return False
    cells = int.from_bytes(data[at + 3:at + 5], "big")
    start = int.from_bytes(data[at + 5:at + 7], "big") or 65536
    head = 8 if kind in (TABLE_LEAF, INDEX_LEAF) else 12
    return (at - (n - 1) * size) + head + 2 * cells <= start <= size


def _apply_wal(image: Image, wal: Path) -> int:
    """Copy the log's committed frames into the pages (the last frame of a page wins, as in SQLite)."""
    try:
        log = wal.read_bytes()
    except OSError:
        return 0
    if len(log) < 32 or int.from_bytes(log[:4], "big") not in (0x377F0682, 0x377F0683):
        return 0
    big = log[3] == 0x83
    size = int.from_bytes(log[8:12], "big")
    if size != image.page_size:
        return 0
    salt = log[16:24]
    s1, s2 = _wal_checksum(log[:24], 0, 0, big)
    if (s1, s2) != struct.unpack(">II", log[24:32]):
        return 0
    pending: dict[int, bytes] = {}
    committed: dict[int, bytes] = {}
    frame = 24 + size
    at = 32
    while at + frame <= len(log):
        head = log[at:at + 24]
        if head[8:16] != salt:
            break
        s1, s2 = _wal_checksum(head[:8], s1, s2, big)
        s1, s2 = _wal_checksum(log[at + 24:at + frame], s1, s2, big)
        if (s1, s2) != struct.unpack(">II", head[16:24]):
            break
        number, commit = struct.unpack(">II", head[:8])
        pending[number] = log[at + 24:at + frame]
        if commit:
            committed.update(pending)
            pending.clear()
            need = commit * size
            if len(image.data) < need:
                image.data.extend(bytes(need - len(image.data)))
        at += frame
    for number, page in committed.items():
        if 1 <= number < MAX_PAGES:
            need = number * size
            if len(image.data) < need:
                image.data.extend(bytes(need - len(image.data)))
            image.data[(number - 1) * size:need] = page
    return len(committed)


def _wal_checksum(data: bytes, s1: int, s2: int, big: bool) -> tuple[int, int]:
    words = struct.unpack((">" if big else "<") + f"{len(data) // 4}I", data)
    for i in range(0, len(words), 2):
        s1 = (s1 + words[i] + s2) & 0xFFFFFFFF
        s2 = (s2 + words[i + 1] + s1) & 0xFFFFFFFF
    return s1, s2


def _write_header(image: Image, keep: bool) -> None:
    """A header SQLite accepts for the copy: rollback journal (the log is applied), UTF-8, the real page
    count; the free list and counters kept when the old header was sound."""
    old = bytes(image.data[:100])
    h = bytearray(100)
    h[:16] = MAGIC
    h[16:18] = (1 if image.page_size == 65536 else image.page_size).to_bytes(2, "big")
    h[18], h[19], h[20], h[21], h[22], h[23] = 1, 1, image.reserved, 64, 32, 32
    counter = old[24:28] if keep else (1).to_bytes(4, "big")
    h[24:28] = counter
    h[28:32] = image.pages.to_bytes(4, "big")
    trunk = int.from_bytes(old[32:36], "big") if keep else 0
    if keep and 0 < trunk <= image.pages:
        h[32:40] = old[32:40]
    cookie = old[40:44] if keep and old[40:44] != bytes(4) else (1).to_bytes(4, "big")
    h[40:44] = cookie
    h[44:48] = (4).to_bytes(4, "big")
    h[56:60] = (1).to_bytes(4, "big")
    if keep:
        h[60:64] = old[60:64]  # user_version
    h[92:96] = counter
    h[96:100] = (3040001).to_bytes(4, "big")
    image.data[:100] = h

"""Page by page: what a damaged SQLite file still holds, read without SQLite (its ``.recover``, for our tables).

Python's sqlite3 has no recover extension, and SQLite gives up on a file whose end is missing (a store
truncated to 90 % listed no run, although every run's pages were there) or whose header is damaged.
So the doctor works on a repaired copy (:mod:`.pagefile`: padded, its log applied, its header rebuilt),
never on the file itself, and :func:`scan` reads every page of the copy itself: the schema's root
pages, each table's tree from its root, and every table leaf page no tree reaches (an interior page lost
to damage orphans its leaves), which is matched to a table by the shape of its rows. Every page, cell, record and overflow
chain is bounds-checked, so garbage costs the rows on it, never the scan; the free list is read so that
a deleted run's old pages are not brought back.
"""

from __future__ import annotations

import sqlite3
import struct
from dataclasses import dataclass, field

from .pagefile import INDEX_INTERIOR, INDEX_LEAF, TABLE_INTERIOR, TABLE_LEAF, Garbage, Image


# -- pages, cells and records ---------------------------------------------------------------------------------

def _varint(buf: bytes, at: int) -> tuple[int, int]:
    value = 0
    for i in range(8):
        if at + i >= len(buf):
            raise Garbage("a number runs off the page")
        b = buf[at + i]
        value = (value << 7) | (b & 0x7F)
        if b < 0x80:
            return value, at + i + 1
    if at + 8 >= len(buf):
        raise Garbage("a number runs off the page")
    return (value << 8) | buf[at + 8], at + 9


def _btree(image: Image, n: int) -> tuple[int, bytes, int, list[int]]:
    """(kind, page, header offset, cell offsets) of page ``n``, checked."""
    page = image.page(n)
    at = 100 if n == 1 else 0
    kind = page[at]
    if kind not in (TABLE_LEAF, TABLE_INTERIOR, INDEX_LEAF, INDEX_INTERIOR):
        raise Garbage(f"page {n} is not a b-tree page")
    cells = int.from_bytes(page[at + 3:at + 5], "big")
    head = 8 if kind in (TABLE_LEAF, INDEX_LEAF) else 12
    if at + head + 2 * cells > image.usable:
        raise Garbage(f"page {n} claims {cells} cells")
    offsets = [int.from_bytes(page[at + head + 2 * i:at + head + 2 * i + 2], "big") for i in range(cells)]
    return kind, page, at, [o for o in offsets if at + head + 2 * cells <= o < image.usable]


def _children(image: Image, n: int) -> list[int]:
    kind, page, at, offsets = _btree(image, n)
    if kind != TABLE_INTERIOR:
        return []
    out = [int.from_bytes(page[o:o + 4], "big") for o in offsets]
    out.append(int.from_bytes(page[at + 8:at + 12], "big"))
    return [c for c in out if 1 <= c <= image.pages]


def _leaf_rows(image: Image, n: int) -> list[tuple[int, list]]:
    """(rowid, values) of every cell of table leaf page ``n`` that decodes; the others are left out."""
    kind, page, _, offsets = _btree(image, n)
    if kind != TABLE_LEAF:
        return []
    rows = []
    for o in offsets:
        try:
            size, p = _varint(page, o)
            rowid, p = _varint(page, p)
            if rowid >= 1 << 63:
                rowid -= 1 << 64
            rows.append((rowid, _record(_payload(image, page, p, size))))
        except (Garbage, UnicodeDecodeError, struct.error):
            continue
    return rows


def _payload(image: Image, page: bytes, at: int, size: int) -> bytes:
    u = image.usable
    most = u - 35
    if size <= most:
        if at + size > u:
            raise Garbage("a cell runs off its page")
        return page[at:at + size]
    least = ((u - 12) * 32 // 255) - 23
    local = least + (size - least) % (u - 4)
    if local > most:
        local = least
    if at + local + 4 > u or size > 1 << 30:
        raise Garbage("a cell runs off its page")
    out = bytearray(page[at:at + local])
    nxt = int.from_bytes(page[at + local:at + local + 4], "big")
    seen = set()
    while len(out) < size:
        if nxt in seen or not 1 <= nxt <= image.pages:
            raise Garbage("a broken overflow chain")
        seen.add(nxt)
        over = image.page(nxt)
        nxt = int.from_bytes(over[:4], "big")
        out += over[4:u][:size - len(out)]
    return bytes(out)


def _record(payload: bytes) -> list:
    header, p = _varint(payload, 0)
    if not p <= header <= len(payload):
        raise Garbage("a record's header is out of bounds")
    types = []
    while p < header:
        t, p = _varint(payload, p)
        types.append(t)
    if p != header:
        raise Garbage("a record's header is torn")
    values, at = [], header
    for t in types:
        if t == 0:
            values.append(None)
        elif 1 <= t <= 6:
            n = (1, 2, 3, 4, 6, 8)[t - 1]
            if at + n > len(payload):
                raise Garbage("a record is torn")
            values.append(int.from_bytes(payload[at:at + n], "big", signed=True))
            at += n
        elif t == 7:
            if at + 8 > len(payload):
                raise Garbage("a record is torn")
            values.append(struct.unpack(">d", payload[at:at + 8])[0])
            at += 8
        elif t in (8, 9):
            values.append(t - 8)
        elif t >= 12:
            n = (t - 12) // 2
            if at + n > len(payload):
                raise Garbage("a record is torn")
            raw = payload[at:at + n]
            values.append(raw if t % 2 == 0 else raw.decode("utf-8"))
            at += n
        else:
            raise Garbage("a reserved serial type")
    if at != len(payload):
        raise Garbage("a record's values do not fill it")
    return values


# -- the tables -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Column:
    name: str
    kind: str  # INTEGER, REAL, TEXT, BLOB
    notnull: bool
    rowid: bool  # the INTEGER PRIMARY KEY: NULL in the record, the cell's rowid instead


def columns_of(schema_sql: str) -> dict[str, list[Column]]:
    """Every table's columns in the schema (created in memory, read back as SQLite sees them)."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(schema_sql)
        out = {}
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"):
            info = list(conn.execute(f"PRAGMA table_info({name})"))
            pk = [r for r in info if r[5]]
            out[name] = [Column(r[1], (r[2] or "BLOB").split()[0].upper(), bool(r[3]),
                                len(pk) == 1 and r[5] and (r[2] or "").upper().startswith("INTEGER")) for r in info]
        return out
    finally:
        conn.close()


def _fits(values: list, cols: list[Column], least: int) -> bool:
    if not least <= len(values) <= len(cols):
        return False
    for v, c in zip(values, cols):
        if c.rowid:
            if v is not None:
                return False
        elif v is None:
            if c.notnull:
                return False
        elif c.kind == "INTEGER" and not isinstance(v, int):
            return False
        elif c.kind == "REAL" and not isinstance(v, (int, float)):
            return False
        elif c.kind == "TEXT" and not isinstance(v, str):
            return False
        elif c.kind == "BLOB" and not isinstance(v, (bytes, int, float, str)):
            return False
    return True


@dataclass
class Found:
    """What the pages hold: per table, rowid -> values (padded to the table's columns)."""

    tables: dict[str, dict[int, list]] = field(default_factory=dict)
    roots: dict[str, int] = field(default_factory=dict)  # from the schema's own table, when it reads
    orphans: int = 0  # table leaf pages no tree reached
    unreadable: int = 0  # pages of a tree that did not parse

    def rows(self, table: str) -> dict[int, list]:
        return self.tables.get(table, {})


def scan(image: Image, columns: dict[str, list[Column]], least: dict[str, int]) -> Found:
    """Every row of ``columns``' tables the pages hold: through each table's tree from its root, then the
    table leaf pages no tree claims and that are not free, matched to a table by their rows' shape
    (``least``: the fewest values a row of each table has, for rows written before columns were added).
    A row a tree holds wins over an unclaimed page's row with the same rowid (a stale copy)."""
    found = Found({name: {} for name in columns})
    claimed: set[int] = set()
    for _, values in _walk(image, 1, claimed, found, lambda v: True):
        if len(values) >= 4 and values[0] == "table" and values[1] in columns and isinstance(values[3], int):
            found.roots[values[1]] = values[3]
    for name, root in found.roots.items():
        cols = columns[name]
        fits = (lambda v, cols=cols, name=name: _fits(v, cols, least.get(name, len(cols))))
        for rowid, values in _walk(image, root, claimed, found, fits):
            found.tables[name].setdefault(rowid, values + [None] * (len(cols) - len(values)))
    free = _free_pages(image)
    for n in range(1, image.pages + 1):
        if n in claimed or n in free:
            continue
        try:
            rows = _leaf_rows(image, n)
        except Garbage:
            continue
        found.orphans += bool(rows)
        for rowid, values in rows:
            name = next((t for t, cols in columns.items() if _fits(values, cols, least.get(t, len(cols)))), None)
            if name is not None:
                cols = columns[name]
                found.tables[name].setdefault(rowid, values + [None] * (len(cols) - len(values)))
    return found


def _walk(image: Image, root: int, claimed: set[int], found: Found, fits) -> list[tuple[int, list]]:
    """The rows that ``fits`` of the table tree at ``root``. A leaf is claimed by the tree when its rows fit
    (a garbage child pointer may lead into another table's pages: those stay unclaimed); pages that do not
    parse are counted and skipped."""
    rows, todo, seen = [], [root], set()
    while todo:
        n = todo.pop()
        if n in seen or not 1 <= n <= image.pages:
            continue
        seen.add(n)
        try:
            kind, _, _, _ = _btree(image, n)
            if kind == TABLE_INTERIOR:
                todo.extend(_children(image, n))
                claimed.add(n)
            elif kind == TABLE_LEAF:
                leaf = _leaf_rows(image, n)
                good = [(rowid, values) for rowid, values in leaf if fits(values)]
                if good or not leaf:
                    claimed.add(n)
                rows.extend(good)
            else:
                raise Garbage(f"page {n} is an index page inside a table")
        except Garbage:
            found.unreadable += 1
    return rows


def _free_pages(image: Image) -> set[int]:
    """The free list's pages (trunks and leaves); empty when the list itself is damaged."""
    header = image.page(1)[:100]
    trunk, total = int.from_bytes(header[32:36], "big"), int.from_bytes(header[36:40], "big")
    free: set[int] = set()
    while trunk:
        if trunk in free or not 1 <= trunk <= image.pages or len(free) > total:
            return set()
        free.add(trunk)
        page = image.page(trunk)
        count = int.from_bytes(page[4:8], "big")
        if count > image.usable // 4 - 2:
            return set()
        for i in range(count):
            leaf = int.from_bytes(page[8 + 4 * i:12 + 4 * i], "big")
            if 1 <= leaf <= image.pages:
                free.add(leaf)
        trunk = int.from_bytes(page[:4], "big")
    return free

"""Issue 32 (5): `placement runs doctor` saves every run whose pages survive, whatever the damage.

A store of 14 runs (each with its history, kept placements and a label that makes its row about 1.6 KB,
so the runs table spans several leaf pages under an interior page) is damaged in copies: truncated,
its header overwritten, pages torn or wiped, its write-ahead log left behind. Which runs must come back is
read from the damaged bytes themselves (a run's row is on a page that survives, whole), never from the
doctor's own reading.
"""

import shutil
import sqlite3

import pytest

from placement_core import Problem, load_devices, load_network
from placement_core.cli import main
from placement_core.store import RunStore
from placement_core.store.recording import start_run

RUNS = 14


def label(i: int) -> str:
    return f"victim-{i:04d}-" + "x" * 1500


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """(folder, page size, ids): a healthy store, built once."""
    home = tmp_path_factory.mktemp("pristine")
    problem = Problem(load_network("alexnet"), load_devices("malvik"))
    with RunStore(home=home) as store:
        ids = [start_run(store, problem, "random", evaluations=30, seed=i, label=label(i))[0] for i in range(RUNS)]
    data = (home / "runs.sqlite").read_bytes()
    return home, int.from_bytes(data[16:18], "big"), ids


@pytest.fixture
def store(pristine, tmp_path):
    home, size, ids = pristine
    shutil.copy(home / "runs.sqlite", tmp_path / "runs.sqlite")
    return tmp_path / "runs.sqlite", size, ids


def doctor(capsys, path):
    code = main(["runs", "doctor", "--home", str(path.parent), "--out", str(path.parent / "saved.sqlite")])
    out, err = capsys.readouterr()
    return code, out, err


def saved_runs(path):
    with RunStore(path=path.parent / "saved.sqlite") as saved:
        runs, damaged = saved.runs_checked()
        assert damaged == []
        for r in runs:  # each one whole: its label, its problem, its history
            assert r.label == label(r.id - 1)
            assert saved.problem(r.id).n_ops == 23
            assert len(saved.history(r.id)) >= 1
        return sorted(r.id for r in runs)


def survivors(data: bytes, size: int, ids, lost_pages=()) -> list[int]:
    """The runs whose rows are whole in ``data`` on pages not in ``lost_pages`` (1-based)."""
    keep = []
    for i, run_id in enumerate(ids):
        at = data.find(label(i).encode())
        if at >= 0 and at // size + 1 not in lost_pages and at + len(label(i)) <= len(data):
            keep.append(run_id)
    return keep


def pages_with(data: bytes, size: int, text: bytes) -> list[int]:
    return sorted({i // size + 1 for i in range(len(data)) if data.startswith(text, i)})


def check(capsys, path, expected, total=RUNS):
    """The doctor saves exactly ``expected`` and says how many (of ``total`` it found traces of, if given)."""
    code, out, err = doctor(capsys, path)
    assert code == 3, (out, err)
    assert f"{'' if total is None else total} run(s): {len(expected)} readable" in out, out
    assert f"wrote {path.parent / 'saved.sqlite'}: {len(expected)} run(s)" in out, out
    assert saved_runs(path) == expected
    return out


@pytest.mark.parametrize("share", [0.95, 0.9, 0.8, 0.6])
def test_a_truncated_store(capsys, store, share):
    path, size, ids = store
    data = path.read_bytes()
    cut = int(len(data) * share)
    path.write_bytes(data[:cut])
    expected = survivors(data[:cut], size, ids)
    assert len(expected) >= RUNS // 3  # the test means something
    check(capsys, path, expected, total=RUNS if share >= 0.9 else None)


@pytest.mark.parametrize("damage", ["zeros", "garbage", "page size", "not sqlite"])
def test_a_damaged_header(capsys, store, damage):
    path, size, ids = store
    data = bytearray(path.read_bytes())
    if damage == "zeros":
        data[:100] = bytes(100)
    elif damage == "garbage":
        data[:100] = bytes((i * 37 + 11) % 256 for i in range(100))
    elif damage == "page size":
        data[16:18] = (3000).to_bytes(2, "big")
    else:
        data[:16] = b"NOT A DATABASE!!"
    path.write_bytes(bytes(data))
    check(capsys, path, ids)


def test_torn_and_wiped_pages(capsys, store):
    """The runs table's interior page wiped (every leaf orphaned), one of its leaves torn in half, one
    history page wiped: the runs on the torn half are lost, every other one comes back."""
    path, size, ids = store
    data = bytearray(path.read_bytes())
    with sqlite3.connect(path) as c:
        root = c.execute("SELECT rootpage FROM sqlite_master WHERE name='runs'").fetchone()[0]
    assert data[(root - 1) * size] == 5  # an interior page: the runs span several leaves
    data[(root - 1) * size:root * size] = b"\xde\xad\xbe\xef" * (size // 4)
    leaf = pages_with(bytes(data), size, label(5).encode())[0]
    half = (leaf - 1) * size + size // 2
    torn = [i for i in range(RUNS) if (leaf - 1) * size + size // 2 <= bytes(data).find(label(i).encode()) + 1600
            and bytes(data).find(label(i).encode()) // size + 1 == leaf]
    data[half:leaf * size] = bytes((i * 91 + 7) % 256 for i in range(leaf * size - half))
    path.write_bytes(bytes(data))
    expected = [run_id for i, run_id in enumerate(ids) if i not in torn]
    assert 1 <= len(torn) <= 2 and len(expected) >= RUNS - 2
    out = check(capsys, path, expected)
    assert "integrity check:" in out


def test_a_log_left_behind_is_read(capsys, tmp_path, pristine):
    """A process killed before its log was folded in: the runs only the log holds come back too."""
    home, size, ids = pristine
    live = tmp_path / "live"
    live.mkdir()
    shutil.copy(home / "runs.sqlite", live / "runs.sqlite")
    problem = Problem(load_network("alexnet"), load_devices("malvik"))
    writer = RunStore(home=live)
    writer._conn.execute("PRAGMA wal_autocheckpoint=0")
    extra = start_run(writer, problem, "random", evaluations=30, seed=99, label=label(RUNS))[0]
    path = tmp_path / "runs.sqlite"
    shutil.copy(live / "runs.sqlite", path)
    shutil.copy(live / "runs.sqlite-wal", tmp_path / "runs.sqlite-wal")
    writer.close()
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * 0.9)])
    check(capsys, path, ids + [extra], total=RUNS + 1)


def test_nothing_readable(capsys, tmp_path):
    path = tmp_path / "runs.sqlite"
    path.write_bytes(bytes((i * 13) % 256 for i in range(20000)))
    code, out, err = doctor(capsys, path)
    assert code == 3 and "nothing can be salvaged" in out and not (tmp_path / "saved.sqlite").exists()

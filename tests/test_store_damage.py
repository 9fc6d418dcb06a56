"""A damaged, emptied, replaced or foreign run store, stale process claims: clear errors, nothing lost."""

import hashlib
import os
import socket
import sqlite3
import subprocess
import sys

import pytest

from placement_core import Problem, load_devices, load_network
from placement_core.cli import main
from placement_core.base.errors import InputError
from placement_core.store.recording import start_run
from placement_core.store import RunStore, StoreError, process_start, store_error


@pytest.fixture(scope="module")
def problem():
    return Problem(load_network("alexnet"), load_devices("malvik"))


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sql(path, statement, args=()):
    """Closed on return: Python 3.11's connection sits in a reference cycle (its statement cache), so left to the
    collector its close, which checkpoints the WAL into the main file, could come after a test's digest."""
    c = sqlite3.connect(path)
    try:
        with c:
            c.execute(statement, args)
    finally:
        c.close()


# -- damage in one row or one page costs only those runs --------------------------------------------------

def test_garbage_in_one_json_cell_costs_only_that_run(capsys, tmp_path, problem):
    with RunStore(home=tmp_path) as store:
        ids = [store.create_run(problem, "random", {}, seed, evaluations=10) for seed in range(3)]
    sql(tmp_path / "runs.sqlite", "UPDATE runs SET params='{not json' WHERE id=?", (ids[1],))
    code, out, err = cli(capsys, "runs", "list", "--home", str(tmp_path))
    assert code == 0
    listed = [line.split()[:2] for line in out.splitlines()[2:]]
    assert \
        listed == [[str(ids[2]), "running"], [str(ids[1]), "damaged"], [str(ids[0]), "running"]]
    assert f"run {ids[1]} is damaged: its params is not valid JSON" in err and "placement runs doctor" in err
    code, _, err = cli(capsys, "runs", "show", str(ids[1]), "--home", str(tmp_path))
    assert code == 2 and f"run {ids[1]} is damaged" in err and err.count("\n") == 1
    assert f"`placement runs delete {ids[1]}`" in err and "move" not in err.lower()
    assert cli(capsys, "runs", "show", str(ids[0]), "--home", str(tmp_path))[0] == 0
    # a damaged run can be deleted on its own (its process, this one, is checked from the plain columns)
    code, out, err = cli(capsys, "runs", "delete", str(ids[1]), "--home", str(tmp_path), "--force")
    assert (code, out) == (0, f"deleted run {ids[1]}\n"), err
    with RunStore(home=tmp_path) as store:
        assert [r.id for r in store.runs()] == [ids[2], ids[0]]


def _store_with_a_damaged_page(tmp_path, problem, n=30):
    """n runs whose labels spread them over many pages; one leaf page of the runs table overwritten.

    Returns (path, every id, the ids whose rows were on that page), found from the file's bytes."""
    path = tmp_path / "runs.sqlite"
    with RunStore(path=path) as store:
        ids = [store.create_run(problem, "random", {"batch": 8}, i, evaluations=10,
                                label=f"victim-{i:04d}-" + "x" * 1500) for i in range(n)]
    data = bytearray(path.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    at = data.index(b"victim-0012-") // page_size * page_size
    page = bytes(data[at:at + page_size])
    on_page = {ids[i] for i in range(n) if f"victim-{i:04d}-".encode() in page}
    data[at:at + page_size] = b"\x0d\xff\xff\xff" * (page_size // 4)  # a leaf header with nonsense cell counts
    path.write_bytes(bytes(data))
    return path, ids, on_page


def test_a_damaged_page_lists_the_rest_and_the_doctor_salvages_them(capsys, tmp_path, problem):
    path, ids, on_page = _store_with_a_damaged_page(tmp_path, problem)
    assert 1 <= len(on_page) <= 3 and ids[12] in on_page
    before = digest(path)
    code, out, err = cli(capsys, "runs", "list", "--home", str(tmp_path), "--json")
    assert code == 0, err
    import json
    rows = json.loads(out)
    assert sorted(r["id"] for r in rows if r["status"] != "damaged") == sorted(set(ids) - on_page)
    assert sorted(r["id"] for r in rows if r["status"] == "damaged") == sorted(on_page)
    assert all(f"run {i} is damaged: its row cannot be read" in err for i in on_page)
    # a run on another page still opens
    assert cli(capsys, "runs", "show", str(ids[0]), "--home", str(tmp_path))[0] == 0

    code, out, err = cli(capsys, "runs", "doctor", "--home", str(tmp_path), "--out", str(tmp_path / "saved.sqlite"))
    assert code == 3, err
    assert "integrity check:" in out and f"{len(ids)} run(s): {len(ids) - len(on_page)} readable, " \
                                          f"{len(on_page)} damaged" in out
    assert f"wrote {tmp_path / 'saved.sqlite'}: {len(ids) - len(on_page)} run(s)" in out
    assert digest(path) == before  # the damaged file is only read
    with RunStore(path=tmp_path / "saved.sqlite") as saved:
        runs, damaged = saved.runs_checked()
        assert damaged == [] and sorted(r.id for r in runs) == sorted(set(ids) - on_page)
        assert all(r.label == f"victim-{ids.index(r.id):04d}-" + "x" * 1500 and r.params == {"batch": 8}
                   for r in runs)
        assert saved.problem(ids[0]).n_ops == problem.n_ops  # network and devices came along
        assert saved.create_run(problem, "random", {}, 0, evaluations=1) == max(ids) + 1  # ids are not reused
    code, out, _ = cli(capsys, "runs", "doctor", "--home", str(tmp_path), "--out", str(tmp_path / "saved.sqlite"))
    assert code == 2  # never overwrites


def test_the_doctor_on_a_healthy_store_writes_nothing(capsys, tmp_path, problem):
    with RunStore(home=tmp_path) as store:
        store.create_run(problem, "random", {}, 0, evaluations=10)
    code, out, _ = cli(capsys, "runs", "doctor", "--home", str(tmp_path))
    assert code == 0 and out.startswith(f"checked {tmp_path / 'runs.sqlite'}: no problems found")
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("runs.sqlite")) == []


def test_the_doctor_salvages_a_store_older_than_the_seeding_column_and_keeps_a_seeding(capsys, tmp_path, problem):
    seeding = {"init": "heft", "placements": 1, "evaluations": 1, "best_label": "heft", "best_objective_s": 0.5,
               "with_current": False}
    for home, drop in ((tmp_path / "old", True), (tmp_path / "new", False)):
        with RunStore(home=home) as store:
            kept = store.create_run(problem, "random", {}, 0, evaluations=10, seeding=None if drop else seeding)
            bad = store.create_run(problem, "random", {}, 1, evaluations=10)
        with sqlite3.connect(home / "runs.sqlite") as c:
            c.execute("UPDATE runs SET params='{not json' WHERE id=?", (bad,))
            if drop:  # as a store written before the column existed
                c.execute("ALTER TABLE runs DROP COLUMN seeding")
        code, out, err = cli(capsys, "runs", "doctor", "--home", str(home), "--out", str(home / "saved.sqlite"))
        assert code == 3 and "1 readable, 1 damaged" in out, err
        with RunStore(path=home / "saved.sqlite") as saved:
            assert [r.id for r in saved.runs()] == [kept]
            assert saved.get(kept).seeding == (None if drop else seeding)


# -- a store that is empty, foreign, newer, or replaced under a running process --------------------------

def test_an_empty_store_file_is_damage_not_a_new_store(capsys, tmp_path):
    (tmp_path / "runs.sqlite").write_bytes(b"")
    code, _, err = cli(capsys, "runs", "list", "--home", str(tmp_path))
    assert code == 2 and "is empty (0 bytes)" in err and "restore it from a backup" in err.lower()
    assert (tmp_path / "runs.sqlite").stat().st_size == 0  # not silently turned into a new store
    code, _, err = cli(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm", "random",
                       "--budget", "5", "--home", str(tmp_path))
    assert code == 2 and "is empty (0 bytes)" in err


def test_a_new_store_is_made_whole_and_says_so(tmp_path):
    with RunStore(home=tmp_path) as store:
        assert store.created
    with RunStore(home=tmp_path) as store:
        assert not store.created
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("runs.sqlite")) == []
    with sqlite3.connect(tmp_path / "runs.sqlite") as c:
        assert c.execute("PRAGMA user_version").fetchone() == (1,)
        assert c.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == ("1",)


def test_a_store_from_a_newer_version_or_another_program_is_refused_unchanged(tmp_path):
    with RunStore(home=tmp_path):
        pass
    path = tmp_path / "runs.sqlite"
    sql(path, "UPDATE meta SET value='7' WHERE key='schema_version'")
    before = digest(path)
    with pytest.raises(StoreError, match=r"written by a newer version of placement \(store schema 7; this version "
                                         r"reads schema 1 and older\)"):
        RunStore(home=tmp_path)
    assert digest(path) == before
    other = tmp_path / "other"
    other.mkdir()
    sql(other / "runs.sqlite", "CREATE TABLE photos(id INTEGER)")
    with pytest.raises(StoreError, match="is an SQLite database but not a run store"):
        RunStore(home=other)


def test_garbage_advises_the_doctor_and_never_moving_the_file_away(tmp_path):
    (tmp_path / "runs.sqlite").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError) as e:
        RunStore(home=tmp_path)
    assert "cannot open the run store" in e.value.message and "placement runs doctor" in e.value.message
    assert "move" not in e.value.message.lower()
    # a read-only folder or a failing disk: the store is fine, so nothing suggests replacing it
    for text in ("attempt to write a readonly database", "unable to open database file", "disk I/O error"):
        message = store_error(sqlite3.OperationalError(text), tmp_path / "runs.sqlite", "open").message
        assert "the store is left as it is" in message and "doctor" not in message and "move" not in message.lower()


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_store_deleted_or_replaced_under_a_running_optimization_fails_that_run(tmp_path, problem, how):
    path = tmp_path / "runs.sqlite"
    done = []

    def meddle(progress):
        if done:
            return
        done.append(1)
        for name in ("runs.sqlite", "runs.sqlite-wal", "runs.sqlite-shm"):
            (tmp_path / name).unlink(missing_ok=True)
        if how == "replaced":
            with RunStore(path=path):  # e.g. a backup or a salvaged store moved into place
                pass

    with RunStore(home=tmp_path) as store:
        with pytest.raises(StoreError) as e:
            start_run(store, problem, "random", evaluations=400, checkpoint_every=50, progress=meddle)
    assert e.value.message.startswith(f"{path}: run 1 stopped: the run store was deleted or replaced while "
                                      "this process was using it")
    if how == "replaced":
        with RunStore(home=tmp_path) as store:
            assert store.runs() == []  # nothing written into the file that took its place


# -- process claims: a reused pid, --force, a run taken over ------------------------------------------------

def test_process_start_is_field_22_of_proc_stat():
    fields = open(f"/proc/{os.getpid()}/stat").read().rsplit(")", 1)[1].split()
    boot = open("/proc/sys/kernel/random/boot_id").read().strip()
    assert process_start(os.getpid()) == f"{boot}:{fields[19]}"  # fields[0] is field 3 (the state)
    assert process_start(2**22 + 12345) is None


def test_a_pid_now_used_by_another_process_is_an_interrupted_run(capsys, tmp_path, problem):
    with RunStore(home=tmp_path) as store:
        run_id = store.create_run(problem, "random", {}, 0, evaluations=20)
        assert store.get(run_id).pid_start == process_start(os.getpid())
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # the pid now names a live process, but not the one that started the run
        sql(tmp_path / "runs.sqlite", "UPDATE runs SET pid=? WHERE id=?", (sleeper.pid, run_id))
        with RunStore(home=tmp_path) as store:
            assert store.get(run_id).display_status == "interrupted"
        code, out, err = cli(capsys, "optimize", "--resume", str(run_id), "--home", str(tmp_path), "--quiet")
        assert code == 0, err
        # the same pid with its own start time is a live claim
        sql(tmp_path / "runs.sqlite", "UPDATE runs SET status='running', pid=?, pid_start=? WHERE id=?",
            (sleeper.pid, process_start(sleeper.pid), run_id))
        with RunStore(home=tmp_path) as store:
            assert store.get(run_id).display_status == "running"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_force_deletes_and_resumes_a_claim_that_cannot_be_checked(capsys, tmp_path, problem):
    with RunStore(home=tmp_path) as store:
        a = store.create_run(problem, "random", {}, 0, evaluations=20)
        b = store.create_run(problem, "random", {}, 1, evaluations=20)
    for rid in (a, b):
        sql(tmp_path / "runs.sqlite", "UPDATE runs SET pid=4242, host='gone-host' WHERE id=?", (rid,))
    home = ["--home", str(tmp_path)]
    assert cli(capsys, "runs", "delete", str(a), *home)[0] == 2
    assert cli(capsys, "runs", "delete", str(a), *home, "--force")[:2] == (0, f"deleted run {a}\n")
    assert cli(capsys, "optimize", "--resume", str(b), *home, "--quiet")[0] == 2
    code, _, err = cli(capsys, "optimize", "--resume", str(b), *home, "--quiet", "--force")
    assert code == 0, err
    with RunStore(home=tmp_path) as store:
        [rec] = store.runs()
        assert (rec.id, rec.status, rec.evaluations, rec.host) == (b, "done", 20, socket.gethostname())


def test_a_run_taken_over_elsewhere_stops_here_and_stays_with_its_new_process(tmp_path, problem):
    def take_over(progress):
        sql(tmp_path / "runs.sqlite", "UPDATE runs SET pid=4242, host='elsewhere' WHERE id=1")

    with RunStore(home=tmp_path) as store:
        with pytest.raises(StoreError, match=r"run 1 was taken over by another process \(process 4242 on "
                                             r"elsewhere\) while this process was running it"):
            start_run(store, problem, "random", evaluations=400, checkpoint_every=50, progress=take_over)
        rec = store.get(1)
        assert (rec.status, rec.pid, rec.host, rec.error) == ("running", 4242, "elsewhere", None)


def test_a_run_deleted_while_it_runs_is_reported_as_not_stored(tmp_path, problem):
    def delete(progress):
        sql(tmp_path / "runs.sqlite", "DELETE FROM runs WHERE id=1")

    with RunStore(home=tmp_path) as store:
        with pytest.raises(InputError, match="run 1 was deleted while this process was running it"):
            start_run(store, problem, "random", evaluations=400, checkpoint_every=50, progress=delete)

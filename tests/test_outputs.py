"""Output files (--out, --trace): only regular files or new paths, atomically, and a full disk is exit 2."""

import errno
import json
import os
import stat

import pytest

from placement_core.cli import main
from placement_core.base.errors import InputError
from placement_core.base.outputs import check_output_file, write_output

SIMULATE = ["simulate", "--network", "alexnet", "--devices", "malvik", "--placement", "single:gpu0"]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def outputs_of(tmp_path, target):
    """Every way the CLI writes a file, aimed at ``target``."""
    return [[*SIMULATE, "--trace", str(target)],
            ["optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm", "random", "--budget", "3",
             "--no-store", "--quiet", "--out", str(target)],
            ["runs", "benchmarks", "--home", str(tmp_path / "home"), "--out", str(target)]]


def test_a_fifo_is_refused_and_stays_a_fifo(tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for argv in outputs_of(tmp_path, fifo):
        code, _, err = run(capsys, *argv)
        assert code == 2, err
        assert "is a named pipe (FIFO), not a regular file" in err and err.count("\n") == 1
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_device_node_is_refused_and_stays_one(tmp_path, capsys):
    """A copy of /dev/null (char 1:3) made here: the old code renamed a regular file over it (as root: any)."""
    node = tmp_path / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError):
        pytest.skip("cannot create a device node here")
    for argv in outputs_of(tmp_path, node):
        code, _, err = run(capsys, *argv)
        assert code == 2 and "is a character device, not a regular file" in err
        assert stat.S_ISCHR(os.lstat(node).st_mode)
    with pytest.raises(InputError, match="character device"):
        check_output_file("/dev/null", "--out")  # checked only: never written


def test_a_symlink_is_refused_naming_its_target(tmp_path, capsys):
    target = tmp_path / "real.json"
    target.write_text("keep me")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    for argv in outputs_of(tmp_path, link):
        code, _, err = run(capsys, *argv)
        assert code == 2 and "is a symbolic link (to " in err and "links are not followed" in err
        assert link.is_symlink() and target.read_text() == "keep me"


def test_a_trailing_slash_names_a_folder_never_a_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for argv in outputs_of(tmp_path, "newdir/"):
        code, _, err = run(capsys, *argv)
        assert code == 2 and "ends with a slash, so it names a folder" in err
        assert not os.path.lexists(tmp_path / "newdir")
    (tmp_path / "there").mkdir()
    code, _, err = run(capsys, *SIMULATE, "--trace", "there/")
    assert code == 2 and "is a directory" in err


def _disk_full_after(monkeypatch, nbytes: int):
    """Writes fail with ENOSPC once ``nbytes`` went through (as on a full disk)."""
    real = os.fdopen

    class Full:
        def __init__(self, f):
            self.f, self.left = f, nbytes

        def write(self, data):
            if len(data) > self.left:
                self.f.write(data[:self.left])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.left -= len(data)
            return self.f.write(data)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(os, "fdopen", lambda *a, **k: Full(real(*a, **k)))


def test_a_full_disk_is_exit_2_and_leaves_the_old_file(tmp_path, capsys, monkeypatch):
    old = tmp_path / "out.json"
    for argv in outputs_of(tmp_path, old)[:2]:  # simulate --trace, optimize --out (both wrote through write_json)
        old.write_text("old")
        with monkeypatch.context() as m:
            _disk_full_after(m, 100)
            code, _, err = run(capsys, *argv)
        assert code == 2, err
        assert "the disk is full (No space left on device); nothing was written" in err and err.count("\n") == 1
        assert old.read_text() == "old"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]  # no half-written temporary file


def test_write_output_replaces_a_regular_file_keeping_its_mode(tmp_path):
    path = tmp_path / "a.json"
    path.write_text("old")
    path.chmod(0o640)
    write_output(path, b'{"x": 1}\n', "--out")
    assert json.loads(path.read_text()) == {"x": 1} and stat.S_IMODE(path.stat().st_mode) == 0o640
    write_output(tmp_path / "new.json", b"1\n")
    assert (tmp_path / "new.json").read_text() == "1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "new.json"]


def test_a_target_that_became_a_link_before_the_write_is_refused(tmp_path):
    """check_output_file ran before a long optimization; the path is checked again at the rename."""
    path = check_output_file(str(tmp_path / "late.json"), "--out")
    other = tmp_path / "elsewhere"
    other.write_text("keep")
    path.symlink_to(other)
    with pytest.raises(InputError, match="symbolic link"):
        write_output(path, b"x", "--out")
    assert other.read_text() == "keep" and sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "late.json"]

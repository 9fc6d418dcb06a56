"""Model code on the Network page: shown and confirmed before it runs, run in a worker process with a
timeout, kept under $PLACEMENT_HOME/uploads and removed when done, and switchable off."""

import hashlib
import os
import pwd
import time
from pathlib import Path

import pytest

from apptest_util import assert_clean, metrics, show_tab, sidebar_text, start, text
from dashboard import torch_import
from placement_core import InputError

MLP = ("import torch.nn as nn\n"
       "def build():\n    return nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 2))\n")


def marked(marker: Path, body: str = MLP) -> bytes:
    """A model file whose import writes the id of the process that ran it to ``marker``."""
    return (f"import os\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\n" + body).encode()


def uploads() -> list[Path]:
    root = Path(os.environ["PLACEMENT_HOME"]) / "uploads"
    return sorted(root.rglob("*")) if root.exists() else []


def ask(at, code: bytes, filename: str = "mlp.py", attr: str = "build", shape: str = "3, 2, 2"):
    """Upload a file and press Import: the confirmation, nothing run."""
    show_tab(at, "net_tab", "Import a PyTorch model")  # the form is drawn while its tab is open
    at.radio(key="torch_source").set_value("Python file")
    at.file_uploader(key="torch_file").upload(filename, code, "text/x-python")
    at.text_input(key="torch_attr").set_value(attr)
    at.text_input(key="torch_shape").set_value(shape)
    at.button(key="FormSubmitter:torch_import-Import").click().run()
    assert not at.exception
    return at


def confirm(at):
    at.checkbox(key="torch_confirm_ok").check().run()
    at.button(key="torch_confirm_run").click().run(timeout=120)
    assert not at.exception
    return at


@pytest.mark.workers
def test_nothing_runs_before_the_user_confirms_then_it_runs_in_another_process(tmp_path):
    pytest.importorskip("torch")
    marker = tmp_path / "ran"
    code = marked(marker)
    at = ask(start(), code)
    assert not marker.exists() and uploads() == []  # not run, not even written to disk
    page = text(at)
    # what will run and as whom
    assert hashlib.sha256(code).hexdigest() in page and f"{len(code):,} bytes" in page
    assert [c.value for c in at.code] == [code.decode().rstrip("\n")]  # st.code drops the last newline
    who = pwd.getpwuid(os.geteuid()).pw_name
    assert f"OS user **{who}**" in page and "not a sandbox" in page and "full environment" in page
    assert at.button(key="torch_confirm_run").disabled  # until the box is ticked (AppTest cannot click it either)
    confirm(at)
    assert_clean(at)
    assert "Imported build: 5 ops at batch size 32" in text(at)
    assert metrics(at)["Ops"] == "5" and "build" in sidebar_text(at)
    assert int(marker.read_text()) != os.getpid()  # it ran, in a worker process (AppTest runs the app here)
    # the confirmed file sits in a private folder under $PLACEMENT_HOME/uploads, for the Benchmark page
    [folder, kept] = uploads()
    assert kept.read_bytes() == code and kept.name == "mlp.py"
    assert oct(folder.stat().st_mode & 0o777) == "0o700" and oct(kept.stat().st_mode & 0o777) == "0o600"
    assert at.session_state["network_source"] == (f"{kept}:build", "3, 2, 2")
    assert "torch_review" not in at.session_state
    # the next import of this session removes it
    other = tmp_path / "ran2"
    confirm(ask(at, marked(other), filename="second.py"))
    assert other.exists() and [p.name for p in uploads() if p.is_file()] == ["second.py"]


@pytest.mark.workers
def test_a_failed_import_leaves_no_file_and_says_why(tmp_path):
    pytest.importorskip("torch")
    at = confirm(ask(start(), b"import torch.nn as nn\nraise RuntimeError('no GPU here')\n"))
    [err] = at.error
    assert "RuntimeError: no GPU here" in err.value
    assert uploads() == []
    assert "torch_confirm_run" not in [b.key for b in at.button]  # the confirmation is gone


def test_the_confirmation_is_for_one_file(tmp_path):
    """Ticked for one file, the box starts unticked for the next; Cancel runs nothing."""
    marker = tmp_path / "ran"
    at = ask(start(), marked(marker))
    at.checkbox(key="torch_confirm_ok").check().run()
    ask(at, marked(marker, MLP + "# changed\n"))
    assert not at.checkbox(key="torch_confirm_ok").value and at.button(key="torch_confirm_run").disabled
    assert "# changed" in at.code[0].value
    at.button(key="torch_confirm_cancel").click().run()
    assert not marker.exists() and "torch_confirm_run" not in [b.key for b in at.button]


@pytest.mark.workers
def test_an_import_that_hangs_is_stopped_with_a_clear_error(tmp_path):
    pytest.importorskip("torch")
    from placement_core.torch.isolated import import_in_subprocess
    pid_file = tmp_path / "pid"
    model = tmp_path / "slow.py"
    model.write_text(f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n")
    t0 = time.monotonic()
    # 10 s: long enough for the worker to import torch and reach the model on a busy machine (seen: 3.9 s)
    with pytest.raises(InputError, match=r"did not finish within 10 s and was stopped"):
        import_in_subprocess(f"{model}:build", (1, 4), 1, timeout=10)
    assert time.monotonic() - t0 < 60
    with pytest.raises(ProcessLookupError):  # the worker was killed, not left running
        os.kill(int(pid_file.read_text()), 0)


@pytest.mark.workers
def test_the_worker_gives_the_same_graph_as_an_import_in_process():
    pytest.importorskip("torch")
    from placement_core.formats.network import network_to_dict
    from placement_core.torch.model_import import import_module
    from placement_core.torch.isolated import import_in_subprocess
    from placement_core.torch.sources import load_model
    there = import_in_subprocess("torchvision:squeezenet1_0", (1, 3, 32, 32), 8)
    here = import_module(load_model("torchvision:squeezenet1_0"), (1, 3, 32, 32), name="squeezenet1_0",
                         batch_size=8)
    assert network_to_dict(there) == network_to_dict(here)


@pytest.mark.workers
def test_an_interpreter_exit_in_the_model_is_an_error_message(tmp_path):
    pytest.importorskip("torch")
    from placement_core.torch.isolated import import_in_subprocess
    model = tmp_path / "bye.py"
    model.write_text("import os\nos._exit(7)\n")
    with pytest.raises(InputError, match=r"exited \(code 7\) without a model"):
        import_in_subprocess(f"{model}:build", (1, 4), 1)


@pytest.mark.parametrize("value, allowed", [("0", False), ("false", False), ("OFF", False), (" no ", False),
                                            ("1", True), ("", True), ("yes", True)])
def test_the_switch(monkeypatch, value, allowed):
    monkeypatch.setenv("PLACEMENT_ALLOW_CODE_UPLOAD", value)
    assert torch_import.code_upload_allowed() is allowed


def test_with_code_upload_off_only_torchvision_names_import(monkeypatch):
    monkeypatch.setenv("PLACEMENT_ALLOW_CODE_UPLOAD", "0")
    at = start()
    show_tab(at, "net_tab", "Import a PyTorch model")  # the form is drawn while its tab is open
    assert at.radio(key="torch_source").options == ["torchvision model"]
    assert not [u for u in at.get("file_uploader") if u.key == "torch_file"]
    assert "Importing a model from a Python file is turned off on this server (PLACEMENT_ALLOW_CODE_UPLOAD=0)" \
        in text(at)
    with pytest.raises(InputError, match="turned off"):
        torch_import.review_upload(MLP.encode(), "mlp.py", "build", "3, 2, 2", 1)
    review = torch_import.Review("mlp.py", MLP.encode(), "build", "3, 2, 2", 1)
    with pytest.raises(InputError, match="turned off"):  # a confirmation shown before the switch does not run
        torch_import.import_reviewed(review)
    assert uploads() == []


def test_files_python_would_read_differently_are_refused():
    """What the user reads must be what runs: a coding line (utf-7 turns a comment into code) or bytes that
    are not UTF-8 are refused; invisible and direction-changing characters are counted for a warning."""
    sneaky = b"# coding: utf-7\n# +AAo-import os\n"
    with pytest.raises(InputError, match="declares the encoding utf-7"):
        torch_import.review_upload(sneaky, "m.py", "build", "3", 1)
    with pytest.raises(InputError, match="not UTF-8 text"):
        torch_import.review_upload(b"x = '\xff'\n", "m.py", "build", "3", 1)
    review = torch_import.review_upload("x = 1  # \u202e\u2066 evil\u2069\n".encode(), "m.py", "build", "3", 1)
    assert review.hidden_characters() == 3


def test_a_long_file_is_shown_up_to_a_limit_with_the_count_of_the_rest(monkeypatch):
    monkeypatch.setattr(torch_import, "SHOWN_CHARS", 100)
    code = "".join(f"x{i:03d} = {i:02d}\n" for i in range(30)).encode()  # 10 characters a line
    shown, hidden = torch_import.Review("m.py", code, "build", "3", 1).shown()
    assert shown == code.decode()[:100] and hidden == 20  # 10 whole lines fit in 100 characters
    code = b"y = 1\n" + code  # 6 more: the 10th line no longer fits
    shown, hidden = torch_import.Review("m.py", code, "build", "3", 1).shown()
    assert shown.count("\n") == 10 and shown.endswith("x008 = 08\n") and hidden == 21


def test_uploads_live_under_placement_home_and_old_ones_are_pruned(tmp_path):
    root = Path(os.environ["PLACEMENT_HOME"]) / "uploads"
    first = torch_import.save_upload(b"x = 1\n", "../../evil name.py")
    assert first.parent.parent == root and first.name == "model.py"  # an odd name is not used as a path
    old = root / "old"
    old.mkdir()
    (old / "m.py").write_text("x = 1\n")
    past = time.time() - torch_import.UPLOAD_MAX_AGE_S - 60
    os.utime(old, (past, past))
    second = torch_import.save_upload(b"x = 2\n", "m.py")
    assert not old.exists() and first.exists() and second.exists()
    outside = tmp_path / "keep" / "m.py"
    outside.parent.mkdir()
    outside.write_text("x = 1\n")
    torch_import.remove_upload(outside)  # only folders directly under the uploads folder are removed
    torch_import.remove_upload(first)
    assert outside.exists() and not first.parent.exists()

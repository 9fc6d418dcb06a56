"""Importing a model file in a real browser: nothing runs until the user has read it and confirmed, then it
runs in a worker process; with PLACEMENT_ALLOW_CODE_UPLOAD=0 there is no file option, and a torchvision name
still imports."""

import hashlib
import time

import pytest

import browser_util
from browser_util import choose_python_file, main, no_errors, settle, shot, sidebar_text, wait_text

pytestmark = pytest.mark.browser

MODEL = ("import torch.nn as nn\n\n"
         "def build():\n    return nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 2))\n")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    why = browser_util.missing()
    if why:
        pytest.skip(why)
    home = tmp_path_factory.mktemp("upload_home")
    with browser_util.serve(home, log_name="streamlit-test_browser_upload.log") as url:
        yield home, url


@pytest.fixture(scope="module")
def app_url(served):
    """This module's dashboard (the conftest's ``page`` opens it), whose PLACEMENT_HOME the tests read."""
    return served[1]


def test_an_uploaded_file_runs_only_after_confirmation_and_in_a_worker(page, served, tmp_path):
    pytest.importorskip("torch")
    home, _ = served
    pg = page
    t0 = time.time()
    marker = tmp_path / "ran"
    # importing this file records which process ran it
    code = (f"open({str(marker)!r}, 'w').write(open('/proc/self/cmdline').read().replace(chr(0), ' '))\n"
            + MODEL)
    model = tmp_path / "mlp.py"
    model.write_text(code)
    pg.get_by_role("tab", name="Import a PyTorch model").click()
    choose_python_file(pg)
    uploader = pg.locator("[data-testid='stFileUploader']").filter(has_text="Python file").first
    uploader.locator("[data-testid='stFileUploaderDropzoneInput']").set_input_files(str(model))
    uploader.get_by_text("mlp.py").wait_for()
    pg.get_by_role("textbox", name="Model in the file").fill("build")
    pg.get_by_role("textbox", name="Input shape of one sample").fill("3, 2, 2")
    pg.get_by_role("button", name="Import", exact=True).click()

    # the confirmation: what will run and as whom; nothing has run or been written yet
    wait_text(pg, "Importing this file runs it as Python code on the server")
    settle(pg)
    no_errors(pg)
    box = main(pg).locator(".st-key-torch_review_box")
    shown = box.inner_text()
    assert hashlib.sha256(code.encode()).hexdigest() in shown and f"{len(code.encode()):,} bytes" in shown
    assert "OS user" in shown and "working directory" in shown and "not a sandbox" in shown
    assert "def build():" in box.locator("[data-testid='stCode']").inner_text()
    run = pg.get_by_role("button", name="Run it and import")
    assert run.is_disabled()
    time.sleep(1)
    assert not marker.exists() and not list((home / "uploads").rglob("*.py"))
    shot(pg, "upload-confirmation")
    assert "mlp" not in sidebar_text(pg) and "build" not in sidebar_text(pg)

    # confirm: it runs, in a worker process, and the model is loaded
    box.get_by_text("I have read this file and want to run it as").click()
    settle(pg)
    run.click()
    wait_text(pg, "Imported build: 5 ops at batch size 32", timeout_s=60)
    settle(pg)
    no_errors(pg)
    assert "build" in sidebar_text(pg) and "5 ops · batch 32" in sidebar_text(pg), sidebar_text(pg)
    assert "placement_core.torch.worker" in marker.read_text()  # not the server: a worker ran it
    assert [p.name for p in (home / "uploads").rglob("*.py")] == ["mlp.py"]  # kept under PLACEMENT_HOME
    assert box.count() == 0  # the confirmation is gone
    assert time.time() - t0 < 60


def test_with_code_upload_off_there_is_no_file_option_and_torchvision_still_imports(chromium, tmp_path):
    """A dashboard of its own, started with the switch off (the module's browser opens it)."""
    pytest.importorskip("torch")
    t0 = time.time()
    with browser_util.serve(tmp_path / "home", log_name="streamlit-no-code-upload.log",
                            env={"PLACEMENT_ALLOW_CODE_UPLOAD": "0"}) as url:
        ctx = chromium.new_context(viewport={"width": 1440, "height": 1000})
        pg = ctx.new_page()
        pg.set_default_timeout(30_000)
        pg.goto(url)
        pg.get_by_role("heading", name="Network", exact=True).first.wait_for()
        settle(pg)
        pg.get_by_role("tab", name="Import a PyTorch model").click()
        # the import's form (the page has others: the GPT's, in its own tab)
        form = pg.locator("[data-testid='stForm']").filter(has=pg.get_by_role("textbox", name="torchvision name"))
        wait_text(pg, "Importing a model from a Python file is turned off on this server "
                      "(PLACEMENT_ALLOW_CODE_UPLOAD=0)", scope=form)
        assert form.get_by_role("radio").count() == 1 and form.get_by_role("radio", name="torchvision model").count()
        assert form.locator("[data-testid='stFileUploader']").count() == 0
        assert form.get_by_role("textbox", name="Model in the file").count() == 0
        form.get_by_role("textbox", name="torchvision name").fill("resnet18")
        form.get_by_role("textbox", name="Input shape of one sample").fill("3, 32, 32")
        pg.get_by_role("button", name="Import", exact=True).click()
        wait_text(pg, "Imported resnet18: 70 ops at batch size 32", timeout_s=60)
        settle(pg)
        no_errors(pg)
        assert "resnet18" in sidebar_text(pg) and "70 ops · batch 32" in sidebar_text(pg)
        ctx.close()
    assert time.time() - t0 < 60

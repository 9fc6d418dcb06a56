import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pytest


@pytest.fixture(autouse=True)
def _private_data_dir(tmp_path_factory, monkeypatch):
    """Every test gets its own PLACEMENT_HOME: runs, calibrations and the store never leak."""
    monkeypatch.setenv("PLACEMENT_HOME", str(tmp_path_factory.mktemp("placement_home")))

"""A network's name is text in a file name, never a pattern or a path (issue 31, item 2).

A network named ``a**b`` made the Optimize and Trace settings fail with ``ValueError: Invalid pattern``: the
saved calibrations were looked up with a glob built from the name.
"""

from __future__ import annotations

import json

import pytest

from placement_core import InputError
from placement_core.cost.timings import check_preset, file_stem, load_timings, saved_calibrations, user_timings_path
from placement_core.formats.network import network_from_dict


def _net(name: str):
    return network_from_dict({"format": "placement-network/1", "name": name, "batch_size": 4, "ops": [
        {"name": "x", "kind": "input", "output_bytes": 400, "shape": [4, 3, 8, 8]},
        {"name": "fc", "kind": "linear", "inputs": ["x"], "fwd_flops": 8000, "output_bytes": 40,
         "shape": [4, 10]}]})


@pytest.mark.parametrize("name", ["resnet18", "googlenet(aux_logits=False)", "my-net_v2.1", "Net 3"])
def test_plain_names_keep_their_file_names(name):
    assert file_stem(name) == name  # calibrations saved before the rule keep their files


@pytest.mark.parametrize("name", ["a**b", "../../etc/passwd", "x/y", ".hidden", "[abc]", "a?b", "", "..",
                                  "a" * 200, "nul\x00byte", "ünï", "a.", "$(rm -rf ~)"])
def test_other_names_become_plain_text_with_a_hash(name):
    stem = file_stem(name)
    assert stem and not stem.startswith(".") and len(stem) <= 80
    assert not set(stem) & set("/\\*?[]$\x00 ")  # no separator, no pattern, no shell character
    assert stem != file_stem(name + "x")  # the hash keeps two names apart


def test_names_differing_only_in_pattern_characters_get_different_files():
    stems = {file_stem(n) for n in ["a*b", "a**b", "a?b", "a_b", "a[b"]}
    assert len(stems) == 5


def test_saved_calibrations_of_a_network_named_like_a_pattern(tmp_path, monkeypatch):
    monkeypatch.setenv("PLACEMENT_HOME", str(tmp_path))
    star, plain = _net("a**b"), _net("aXb")
    assert saved_calibrations(star) == {}  # no timings folder at all
    path = user_timings_path("a**b", [4, 3, 8, 8], 4, preset="local")
    assert path.parent == tmp_path / "timings" / "local" and "*" not in path.name
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({}))
    (tmp_path / "timings" / "other").mkdir()
    assert saved_calibrations(star) == {"local": path}
    # "a**b" as a glob matched "aXb"'s file; as text it matches only its own
    assert saved_calibrations(plain) == {}


@pytest.mark.parametrize("preset", ["../x", "a/b", "*", ".", "", "a" * 81])
def test_a_preset_is_a_plain_name_or_refused(preset, tmp_path, monkeypatch):
    monkeypatch.setenv("PLACEMENT_HOME", str(tmp_path))
    with pytest.raises(InputError) as err:
        check_preset(preset)
    assert err.value.field == "preset"
    with pytest.raises(InputError):
        load_timings(preset, _net("n"))
    assert not (tmp_path / "timings").exists()


def test_the_optimize_and_trace_pages_draw_for_a_network_named_like_a_pattern(tmp_path, monkeypatch):
    """The user's journey: upload a network named with glob characters, open Optimize and Trace."""
    from apptest_util import assert_clean, goto, start

    from placement_core import load_network
    from placement_core.formats.network import network_to_dict

    monkeypatch.setenv("PLACEMENT_HOME", str(tmp_path))
    (tmp_path / "timings" / "local").mkdir(parents=True)  # a calibration folder to look into
    data = network_to_dict(load_network("alexnet"))
    data["name"] = "**[evil]*"
    at = start()
    at.file_uploader(key="net_upload").upload("evil.json", json.dumps(data).encode(), "application/json").run()
    assert_clean(at)
    for page in ("optimize", "trace"):
        goto(at, page, timeout=120)
        assert_clean(at)

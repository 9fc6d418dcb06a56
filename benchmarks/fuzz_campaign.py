"""A fuzz campaign through the command line: thousands of mutated files and hostile arguments.

    .venv/bin/python benchmarks/fuzz_campaign.py                    # the default campaign (about 5,100 inputs)
    .venv/bin/python benchmarks/fuzz_campaign.py --scale 3 --seed 7 --show 20

Every input runs ``placement_core.cli.main`` in this process. The contract (README, docs/security.md): an
input ends with exit status 0, or with exit status 2 and exactly one line ``error: ...`` on stderr and nothing
on stdout, never a traceback; a refused ``optimize`` stores no run. Anything else (exit 1, an exception
escaping ``main``, a second stderr line, an input running past the time limit) is counted and shown. The
families cover every file format the CLI reads (networks and devices in our formats and Exprimo's,
placements whole, sharded and Exprimo's with device lists, timing tables with fixed parts, group files,
placement policies, surrogate models, damaged run stores) and hostile values for the options of every
command that finishes quickly. The last count must be zero.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import io
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from placement_core.cli import main  # noqa: E402

LIMIT_S = 60  # one input: longer counts as a failure (a hang, an unbounded loop)
# (command, option): (cap, the most the option accepts). A valid value above the cap is a request for a long run
# (10,000 graphs are 10,000 files at ~0.2 s each; --steps has no upper bound), not a hostile input: it becomes
# the cap; values beyond what the option accepts stay, and must be refused.
LONG = {("graphs generate", "--count"): (20, 10_000), ("train-policy", "--count"): (20, 10_000),
        ("train-policy", "--episodes"): (20, 10_000_000), ("benchmark", "--steps"): (3, None),
        ("benchmark", "--warmup"): (3, None), ("benchmark", "--rounds"): (3, None)}

NETWORK = {"format": "placement-network/1", "name": "n", "batch_size": 4, "ops": [
    {"name": "x", "kind": "input", "output_bytes": 400, "shape": [4, 100]},
    {"name": "fc1", "kind": "linear", "inputs": ["x"], "fwd_flops": 8000, "bwd_flops": 16000, "output_bytes": 40,
     "param_bytes": 4040, "mem_bytes": 4480, "shape": [4, 10]},
    {"name": "act", "kind": "activation", "inputs": ["fc1"], "output_bytes": 40, "mem_bytes": 80, "shape": [4, 10]},
    {"name": "fc2", "kind": "linear", "inputs": [{"op": "act", "bytes": 40}, "x"], "fwd_flops": 80,
     "output_bytes": 8, "param_bytes": 88, "shape": [4, 2], "times": {"gpu": {"fwd": 1e-6, "bwd": 2e-6}}},
]}
DEVICES = {"format": "placement-devices/1", "name": "d", "devices": [
    {"name": "cpu0", "kind": "cpu", "peak_flops": 1e12, "memory_bytes": 1e10, "mem_bandwidth": 5e10},
    {"name": "gpu0", "kind": "gpu", "peak_flops": 1e13, "memory_bytes": 1e9, "mem_bandwidth": 9e11},
    {"name": "gpu1", "kind": "gpu", "peak_flops": 1e13, "memory_bytes": 1e9, "mem_bandwidth": 9e11},
], "channels": [{"name": "pcie", "bandwidth": 16e9, "latency": 1e-5,
                 "routes": [[a, b] for a in ("cpu0", "gpu0", "gpu1") for b in ("cpu0", "gpu0", "gpu1") if a != b]}]}
PLACEMENT = {"format": "placement/1", "assignment": {"x": "cpu0", "fc1": "gpu0", "act": "gpu0", "fc2": "cpu0"}}
SHARDED = {"format": "placement/1", "assignment": {
    "x": "cpu0", "fc1": {"devices": ["gpu0", "gpu1"], "split": "channel", "sizes": [4, 6]},
    "act": {"devices": ["gpu0", "gpu1"], "split": "batch"}, "fc2": "gpu1"}}
EXPRIMO_NET = {"name": "tiny", "layers": {
    "data": {"type": "Input", "parents": [], "tensor": [8, 8, 8, 3]},
    "conv1": {"type": "Convolution", "parents": ["data"], "filter": [3, 3, -1, 8], "strides": [1, 1, 1, 1],
              "padding": "SAME"},
    "pool1": {"type": "Pooling", "parents": ["conv1"], "ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1],
              "padding": "VALID"},
    "mix": {"type": "Block", "parents": ["pool1"], "endpoint": "cat", "layers": {
        "a": {"type": "Convolution", "parents": [], "filter": [1, 1, 8, 2], "strides": [1, 1, 1, 1],
              "padding": "SAME"},
        "b": {"type": "Convolution", "parents": [], "filter": [3, 3, -1, 2], "strides": [1, 1, 1, 1],
              "padding": "SAME"},
        "cat": {"type": "Concatenate", "parents": ["a", "b"], "dim": 3}}},
    "fc": {"type": "InnerProduct", "parents": ["mix"], "num_outputs": 10},
    "softmax": {"type": "Softmax", "parents": ["fc"], "num_classes": 10}}}
EXPRIMO_DEVICES = {
    "comm_channels": [{"type": "pcie3", "bandwidth": 128}, {"type": "pcie3", "bandwidth": 64}],
    "devices": [
        {"model": "Xeon", "clock": 2000, "peak_gflops": 1800, "memory": 395, "mem_bandwidth": 76.8, "type": "cpu",
         "neighbours": [{"comm_channel": 0, "device": 1}, {"comm_channel": 1, "device": 2}]},
        {"model": "V100", "clock": 1312, "peak_gflops": 14000, "memory": 32, "mem_bandwidth": 900, "type": "gpu",
         "neighbours": [{"comm_channel": 0, "device": 0}, {"comm_channel": 0, "device": 2}]},
        {"model": "V100", "clock": 1312, "peak_gflops": 14000, "memory": 32, "mem_bandwidth": 900, "type": "gpu",
         "neighbours": [{"comm_channel": 1, "device": 0}, {"comm_channel": 1, "device": 1}]}]}
EXPRIMO_PLACEMENT = {"data": 0, "conv1": [1, 2, 1], "pool1": 1, "mix/a": 2, "mix/b": 1, "mix/cat": 1, "fc": [2, 1],
                     "softmax": 0, "mix": 1}


def _times(fwd, bwd, update, fixed=0.0):
    return {dev: {"fwd": fwd, "bwd": bwd, "update": update, "fwd_fixed": fixed * fwd, "bwd_fixed": fixed * bwd}
            for dev in ("cpu0", "gpu0", "gpu1")}


TIMINGS = {"format": "placement-timings/1", "network": "n", "input_shape": [1, 100], "batch_size": 4,
           "ops": {"x": _times(0.0, 0.0, 0.0), "fc1": _times(1e-4, 2e-4, 5e-5, 0.3), "act": _times(1e-5, 1e-5, 0.0),
                   "fc2": _times(3e-5, 4e-5, 1e-5, 0.5)}}
GROUPS = {"format": "placement-groups/1", "network": "n", "groups": {"x": ["x"], "fc1": ["fc1"], "act": ["act"],
                                                                     "fc2": ["fc2"]}}

WEIRD = [None, True, False, 0, -1, 1, 2, 7, 2**31, 2**31 - 1, 2**63, -2**63 - 1, 10**400, -10**400, 1e308, -1e308,
         5e-324, 0.5, -0.0, "", "x", "cpu0", "gpu0", "fc1", "💥", "a" * 600, "-1", "\x1b[31mred", "\ud800x", "NaN",
         [], {}, [[]], [0, 1], [-1], [1, 2, 3], ["gpu0", "gpu0"], {"devices": ["gpu0"], "split": "channel"},
         {"devices": ["gpu0", "gpu1"], "split": "sideways"}, {"a": 1}, float("nan"), float("inf")]


def _integer(text: str) -> int | None:
    """What an option's int() makes of ``text`` ("1_000" and "٣" are numbers too), or None."""
    try:
        return int(text)
    except ValueError:
        return None


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, prefix + (i,))


def mutate(rng: random.Random, base, edits: int | None = None):
    """``base`` with 1 to 4 random edits: a value replaced by a weird one, a key or item deleted, an item
    duplicated, a container emptied, a number scaled far out."""
    doc = copy.deepcopy(base)
    for _ in range(edits or rng.randint(1, 4)):
        paths = list(_paths(doc))
        path = rng.choice(paths)
        action = rng.choice(["replace", "replace", "delete", "duplicate", "empty", "scale"])
        if not path:
            if action == "replace":
                doc = copy.deepcopy(rng.choice(WEIRD))
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        if action == "replace":
            parent[key] = copy.deepcopy(rng.choice(WEIRD))
        elif action == "delete":
            del parent[key]
        elif action == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[key]))
        elif action == "empty" and isinstance(parent[key], (list, dict)):
            parent[key] = type(parent[key])()
        elif action == "scale" and isinstance(parent[key], (int, float)) and not isinstance(parent[key], bool):
            try:
                parent[key] = parent[key] * rng.choice([-1, 0, 1e-30, 1e30, 10**40])
            except OverflowError:  # an integer beyond a float, times a float
                parent[key] = -parent[key]
        if not isinstance(doc, (dict, list)):
            break
    return doc


def dumps(doc) -> str:
    return json.dumps(doc, allow_nan=True, ensure_ascii=rng_ascii[0])


rng_ascii = [True]


class Slow(BaseException):
    """The time limit: a BaseException, so that the CLI's last-resort ``except Exception`` (exit 1, "unexpected
    failure") does not hide a hang as an ordinary failure."""


def _alarm(signum, frame):
    raise Slow()


def run(argv: list[str]) -> tuple[str, int | None, str, str]:
    """(outcome, exit status, stdout, stderr): outcome is 0, 2 or what broke the contract."""
    out, err = io.StringIO(), io.StringIO()
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(LIMIT_S)
    code = None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    except SystemExit as e:  # --help
        code = e.code if isinstance(e.code, int) else 0
    except Slow:
        return f"ran past {LIMIT_S} s", None, out.getvalue(), err.getvalue()
    except BaseException as e:  # noqa: BLE001 - the point is to count them
        return f"{type(e).__name__} escaped main", None, out.getvalue(), err.getvalue()
    finally:
        signal.alarm(0)
    o, e = out.getvalue(), err.getvalue()
    if code == 0:
        return ("0" if "Traceback" not in e else "traceback on stderr"), code, o, e
    if code == 2:
        if e.startswith("error: ") and e.count("\n") == 1 and e.endswith("\n") and "Traceback" not in e:
            return ("2" if not o else "stdout with an error"), code, o, e
        return "exit 2 without exactly one error line", code, o, e
    return f"exit {code}", code, o, e


def _stored(home: Path) -> int | str:
    """How many runs the store at ``home`` holds (what a refused command must not change)."""
    if not (home / "runs.sqlite").exists():
        return 0
    from placement_core.store import RunStore
    try:
        with RunStore(home=home) as store:
            return len(store.runs())
    except Exception as e:  # noqa: BLE001
        return f"the store broke: {type(e).__name__}"


class Campaign:
    def __init__(self, seed: int, work: Path, show: int):
        self.rng = random.Random(seed)
        self.work = work
        self.show = show
        self.counts: Counter = Counter()
        self.by_family: dict[str, Counter] = {}
        self.failures: list[tuple[str, list[str], str, str]] = []
        self.n = 0
        self.doctor_found = 0  # `runs doctor` exits 3 when it finds damage (documented): counted as exit 0

    def file(self, doc, name="in.json", text: str | None = None) -> str:
        self.n += 1
        path = self.work / f"{self.n}-{name}"
        path.write_text(text if text is not None else dumps(doc), errors="surrogatepass")
        return str(path)

    def check(self, family: str, argv: list[str], home: Path | None = None) -> None:
        before = _stored(home) if home is not None and argv[:1] == ["optimize"] else None
        outcome, code, out, err = run(argv)
        if outcome == "exit 3" and argv[:2] == ["runs", "doctor"] and not err:
            outcome, self.doctor_found = "0", self.doctor_found + 1  # the doctor's own status: damage found
        if outcome == "2" and before is not None and _stored(home) != before:
            outcome = "a refused optimize stored a run"
        key = outcome if outcome in ("0", "2") else "other"
        self.counts[key] += 1
        self.by_family.setdefault(family, Counter())[key] += 1
        if key == "other":
            self.failures.append((f"{family}: {outcome}", argv, out[-300:], err[-600:]))

    # -- files ----------------------------------------------------------------------------------------------
    def files(self, rounds: int) -> None:
        r = self.rng
        nets = {"network": NETWORK, "exprimo network": EXPRIMO_NET}
        devs = {"devices": DEVICES, "exprimo devices": EXPRIMO_DEVICES}
        net, dev = self.file(NETWORK, "net.json"), self.file(DEVICES, "devs.json")
        enet, edev = self.file(EXPRIMO_NET, "enet.json"), self.file(EXPRIMO_DEVICES, "edevs.json")
        for _ in range(rounds):
            for name, base in nets.items():
                f = self.file(mutate(r, base))
                d = dev if name == "network" else edev
                self.check(name, ["simulate", "--network", f, "--devices", d, "--placement", "single:cpu0", "--json"])
                self.check(name, ["simulate", "--network", f, "--devices", d, "--placement", "stages:2",
                                  "--schedule", r.choice(["gpipe", "1f1b", "zb-h1"]), "--micro-batches", "2"])
            for name, base in devs.items():
                f = self.file(mutate(r, base))
                n = net if name == "devices" else enet
                self.check(name, ["simulate", "--network", n, "--devices", f, "--placement",
                                  r.choice(["single:cpu0", "random:3", "stages:2"]), "--json"])
            for name, base, n, d in (("placement", PLACEMENT, net, dev), ("sharded placement", SHARDED, net, dev),
                                     ("exprimo placement", EXPRIMO_PLACEMENT, enet, edev)):
                f = self.file(mutate(r, base))
                self.check(name, ["simulate", "--network", n, "--devices", d, "--placement", f, "--json"])
                how = r.random()
                if how < 0.3:  # the same file as a pipeline's placement, or exported for PyTorch
                    self.check(name + " (pipeline)", ["simulate", "--network", n, "--devices", d, "--placement", f,
                                                      "--schedule", r.choice(["gpipe", "1f1b", "interleaved-1f1b"]),
                                                      "--micro-batches", "2"])
                elif how < 0.5:  # and its trace written (Chrome's format)
                    self.check(name + " (trace)", ["simulate", "--network", n, "--devices", d, "--placement", f,
                                                   "--trace", str(self.work / f"trace{self.n}.json")])
                elif how < 0.6:
                    self.check(name + " (optimize)", ["optimize", "--network", n, "--devices", d, "--algorithm",
                                                      "ga", "--budget", "30", "--sharding", "channel,batch",
                                                      "--init", f"data-parallel,random:{r.randint(1, 20)}",
                                                      "--no-store", "--quiet", "--json"])
            folder = self.work / f"t{self.n}"
            folder.mkdir()
            (folder / "n.json").write_text(json.dumps(NETWORK))
            if r.random() < 0.5:
                (folder / "n.groups.json").write_text(dumps(mutate(r, GROUPS)))
            t = self.file(mutate(r, TIMINGS), "timings.json")
            self.check("timings", ["simulate", "--network", str(folder / "n.json"), "--devices", dev, "--placement",
                                   r.choice(["single:gpu0", f"{self.file(SHARDED)}", "stages:2"]), "--timings", t,
                                   "--json"])
            raw = bytes(r.randrange(256) for _ in range(r.randint(0, 300)))
            self.check("raw bytes", ["simulate", "--network", self.file(None, text=raw.decode("latin-1")),
                                     "--devices", dev, "--placement", "single:cpu0"])

    def plans(self, rounds: int) -> None:
        """Pipeline plans (``--placement stages:PxV``) under every schedule, and initial mappings (``--init``)."""
        r = self.rng
        for _ in range(rounds):
            p, v = r.choice([0, 1, 2, 3, 4, 5, 8, 9, 64, 9999]), r.choice([None, 0, 1, 2, 3, 7])
            spec = f"stages:{p}" + ("" if v is None else f"x{v}")
            argv = ["simulate", "--network", r.choice(["alexnet", "gpt2", "resnet50"]), "--devices",
                    r.choice(["malvik-4gpu", "nvlink-8gpu", "malvik"]), "--placement", spec,
                    "--schedule", r.choice(["thesis", "gpipe", "1f1b", "interleaved-1f1b", "zb-h1"]), "--json"]
            if r.random() < 0.8:
                argv += ["--micro-batches", str(r.choice([0, 1, 2, 3, 4, 8, 16, 128, 10000, 10001]))]
            if r.random() < 0.3:
                argv += ["--virtual-stages", str(r.choice([0, 1, 2, 3, 9]))]
            if r.random() < 0.2:
                argv += ["--forward-only"]
            self.check("pipeline plan", argv)
        kinds = ["heft", "heft-nocomm", "heft-memory", "min-cut", "m-etf", "m-topo", "expert", "single",
                 "data-parallel", "hybrid-parallel", "heft-sharded", "random", "bayes", "nope", ""]
        for _ in range(rounds // 2):
            init = ",".join(k + (f":{r.choice(['1', '3', '0', '-1', 'x', '100000', '1000'])}" if r.random() < 0.4
                                 else "") for k in r.sample(kinds, r.randint(1, 4)))
            argv = ["optimize", "--network", r.choice(["alexnet", self.file(NETWORK, "net.json")]), "--devices",
                    r.choice(["malvik", self.file(DEVICES, "devs.json")]), "--algorithm",
                    r.choice(["ga", "map-elites", "cem", "annealing", "heft"]), "--budget", "30", "--init", init,
                    "--no-store", "--quiet", "--json"]
            if r.random() < 0.3:
                argv += ["--sharding", r.choice(["channel", "batch", "channel,batch"])]
            self.check("initial mappings", argv)

    def policies(self, rounds: int, home: Path) -> None:
        try:
            import torch  # noqa: F401
        except ImportError:
            return
        r = self.rng
        base = json.loads((ROOT / "assets" / "policies" / "placeto-nmt-malvik-4gpu.json").read_text())
        gdp = json.loads((ROOT / "assets" / "policies" / "gdp-mix-malvik-4gpu.json").read_text())  # first version
        scored = json.loads((ROOT / "assets" / "policies" / "gdp-mix-malvik-4gpu-scored.json").read_text())
        nmt = self.file(None, "nmt.json", text=json.dumps(_family_graph()))
        for i in range(rounds):  # two in three Placeto's, one in six each GDP version's
            doc = mutate(r, {0: gdp, 3: scored}.get(i % 6, base))
            if r.random() < 0.3:  # tensors of the right size, wrong values
                for t in doc.get("tensors", {}).values() if isinstance(doc, dict) and isinstance(
                        doc.get("tensors"), dict) else []:
                    if isinstance(t, dict) and isinstance(t.get("data"), str) and r.random() < 0.2:
                        t["data"] = base64.b64encode(bytes(r.randrange(256) for _ in range(
                            len(base64.b64decode(t["data"], validate=False))))).decode()
            f = self.file(doc, "policy.json")
            self.check("policy", ["optimize", "--algorithm", r.choice(["placeto", "gdp"]), "--policy", f,
                                  "--network", nmt, "--devices", "malvik-4gpu", "--budget", r.choice(["0", "2"]),
                                  "--home", str(home), "--quiet"], home=home)

    def surrogates(self, rounds: int, home: Path) -> None:
        try:
            import sklearn  # noqa: F401
        except ImportError:
            return
        import numpy as np

        from placement_core.store import RunStore
        from placement_core.surrogate.model import SurrogateSpec, model_to_dict, sample_placements
        net, dev = self.file(NETWORK, "net.json"), self.file(DEVICES, "devs.json")
        run(["optimize", "--network", net, "--devices", dev, "--algorithm", "random", "--budget", "20", "--home",
             str(home), "--quiet"])
        with RunStore(home=home) as store:
            run_id = store.runs()[0].id
            problem = store.problem(run_id)
        X = sample_placements(problem, [], 12, np.random.default_rng(0))
        base = json.loads(json.dumps(model_to_dict(problem, SurrogateSpec(), X, problem.evaluate_many(X),
                                                   target="simulated", run_id=run_id,
                                                   validation={"kendall_tau": 0.5, "folds": 5})))
        for _ in range(rounds):
            f = self.file(mutate(self.rng, base), "model.json")
            self.check("surrogate model", ["surrogate", "score", "--model", f, "--run", str(run_id), "--test", "8",
                                           "--home", str(home), "--json"])

    def stores(self, rounds: int) -> None:
        from placement_core import Problem
        from placement_core.formats.catalog import devices_from_data, network_from_data
        from placement_core.store import RunStore
        from placement_core.store.recording import start_run
        pristine = self.work / "pristine"
        pristine.mkdir()
        problem = Problem(network_from_data(NETWORK), devices_from_data(DEVICES))
        with RunStore(home=pristine) as store:
            for i in range(6):
                start_run(store, problem, "ga", evaluations=60, seed=i, label=f"run {i} " + "x" * 300)
        data = (pristine / "runs.sqlite").read_bytes()
        r = self.rng
        for k in range(rounds):
            d = bytearray(data)
            for _ in range(r.randint(1, 3)):
                kind = r.choice(["truncate", "flip", "wipe", "tear", "header"])
                if kind == "truncate":
                    d = d[:r.randint(0, len(d))]
                elif kind == "flip" and d:
                    for _ in range(r.randint(1, 40)):
                        d[r.randrange(len(d))] = r.randrange(256)
                elif kind in ("wipe", "tear") and len(d) >= 4096:
                    p = r.randrange(len(d) // 4096)
                    a = p * 4096 + (r.randrange(4096) if kind == "tear" else 0)
                    d[a:(p + 1) * 4096] = bytes(r.randrange(256) for _ in range((p + 1) * 4096 - a))
                elif kind == "header":
                    d[:100] = bytes(r.randrange(256) for _ in range(100))
            home = self.work / f"store{k}"
            home.mkdir()
            (home / "runs.sqlite").write_bytes(bytes(d))
            self.check("damaged store: doctor", ["runs", "doctor", "--home", str(home), "--out",
                                                 str(home / "saved.sqlite")])
            self.check("damaged store: list", ["runs", "list", "--home", str(home)])
            self.check("damaged store: show", ["runs", "show", str(r.randint(1, 7)), "--home", str(home), "--json"])
            self.check("damaged store: export", ["runs", "export", str(r.randint(1, 6)), "--home", str(home),
                                                 "--what", r.choice(["placement", "history", "snippet"]),
                                                 "--out", str(home / "x.out")])
            if (home / "saved.sqlite").exists():
                saved = self.work / f"saved{k}"
                saved.mkdir()
                shutil.copy(home / "saved.sqlite", saved / "runs.sqlite")
                self.check("salvaged store: list", ["runs", "list", "--home", str(saved), "--json"])

    # -- hostile arguments ------------------------------------------------------------------------------------
    def arguments(self, rounds: int, home: Path) -> None:
        r = self.rng
        net, dev = self.file(NETWORK, "net.json"), self.file(DEVICES, "devs.json")
        pl, shard = self.file(PLACEMENT, "pl.json"), self.file(SHARDED, "sh.json")
        fifo = self.work / "fifo"
        os.mkfifo(fifo)
        # paths stay inside the campaign's folder: as root a hostile "/" or "/nonexistent/x.json" became files and
        # folders in / (graphs generate --out /, runs --home /), which later runs and tests then found there
        values = ["", "-1", "0", "1", "2", "3", "x", "1e999", "nan", "inf", "-0", "1_000", "٣", "0x10", "9" * 30,
                  str(2**63), str(2**31), "10000", "1000000000", "\x1b[31m", "a" * 300, str(self.work), "/dev/full",
                  "/dev/null", str(fifo), str(self.work / "missing" / "x.json"), "n" * 300, net, dev, pl, shard, "stages:0",
                  "stages:2x0", "stages:9999x9999", "stages:2x2", "stages:x", "random:-1", "random:" + "9" * 25,
                  "single:nope", "single:gpu1", "bayes:100000", "random:100000", "heft,bayes:5", "data-parallel",
                  "channel", "channel,batch", "sideways", "gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "thesis",
                  "population=5", "population=0", "mutation_rate=2", "nope=1", "=", "tcp://", "not a url",
                  "tcp://127.0.0.1:1", "ga", "random", "heft", "map-elites", "placeto", "hill-climbing", "exprimo-2020",
                  "infeasible", "placement", "history", "trace", "snippet", "archive", "parquet", "csv", "nmt"]
        options = {
            "simulate": (["--network", net, "--devices", dev, "--placement", pl, "--json"],
                         ["--batch-size", "--batches", "--in-flight", "--micro-batches", "--schedule",
                          "--virtual-stages", "--comp-efficiency", "--comm-efficiency", "--profile", "--penalty",
                          "--placement", "--sharding", "--max-shards", "--trace", "--timings", "--network",
                          "--devices", "--forward-only", "--bogus"]),
            # --seconds: a hostile --budget of 10^9 is a valid run of hours (said before it starts); keep it short
            "optimize": (["--network", net, "--devices", dev, "--algorithm", "ga", "--budget", "40", "--seconds", "3",
                          "--home", str(home), "--quiet", "--json"],
                         ["--algorithm", "--budget", "--seconds", "--seed", "--param", "--init", "--workers",
                          "--out", "--label", "--resume", "--sharding", "--max-shards", "--schedule",
                          "--micro-batches", "--policy", "--dask", "--batches", "--in-flight", "--objective",
                          "--no-store", "--bogus"]),
            "sweep": (["--network", net, "--devices", dev, "--algorithm", "ga,random", "--seeds", "2", "--budget",
                       "30", "--seconds", "3", "--home", str(home), "--json"],
                      ["--algorithm", "--seeds", "--budget", "--param", "--workers", "--out", "--dask", "--bogus"]),
            "runs list": (["--home", str(home)], ["--status", "--home", "--json", "--bogus"]),
            "runs show": (["1", "--home", str(home)], ["--home", "--json"]),
            "runs export": (["1", "--home", str(home), "--what", "placement", "--out", str(self.work / "e.json")],
                            ["--what", "--format", "--out"]),
            "runs benchmarks": (["--home", str(home), "--out", str(self.work / "b.csv")],
                                ["--network", "--run", "--out"]),
            "runs delete": (["99", "--home", str(home)], ["--force", "--home"]),
            "surrogate fit": (["--run", "1", "--out", str(self.work / "m.json"), "--samples", "20", "--home",
                               str(home)], ["--run", "--samples", "--seed", "--encoding", "--learner", "--out"]),
            "graphs generate": (["--family", "nmt", "--count", "2", "--out", str(self.work / "g")],
                                ["--family", "--count", "--seed", "--split", "--out"]),
            "experiment sharding": (["--networks", "alexnet", "--budget", "10", "--out", str(self.work / "sh")],
                                    ["--networks", "--devices", "--budget", "--algorithm", "--max-shards",
                                     "--batch-size", "--markdown", "--out", "--seed"]),
            "experiment e3": (["--budget", "bogus"], ["--budget", "--seeds", "--networks", "--algorithms",
                                                      "--versions", "--workers", "--markdown", "--out"]),
            "experiment seeding": (["--seeds", "0"], ["--bayes", "--seeds", "--checkpoints", "--problems"]),
            "train-policy": (["--family", "nmt", "--count", "2", "--devices", dev, "--episodes", "2", "--rollouts",
                              "2", "--out", str(self.work / "p.json"), "--no-store", "--quiet"],
                             ["--method", "--family", "--count", "--episodes", "--rollouts", "--lr", "--entropy",
                              "--start", "--rewards", "--hidden", "--rounds", "--seed", "--penalty", "--out",
                              "--networks", "--devices"]),
            "benchmark": (["--model", str(ROOT / "tests" / "torch_models.py") + ":SmallCNN", "--input-shape",
                           "2,3,8,8", "--batch-size", "4", "--devices", "cpu:2", "--placement", "stages:2",
                           "--schedule", "gpipe", "--micro-batches", "2", "--steps", "1", "--warmup", "1",
                           "--rounds", "1", "--no-store"],
                          ["--placement", "--schedule", "--micro-batches", "--steps", "--warmup", "--rounds",
                           "--devices", "--batch-size", "--input-shape", "--runner", "--memory-limit", "--timeout",
                           "--simulate", "--timings", "--run", "--top"]),
            "export-placement": (["--model", str(ROOT / "tests" / "torch_models.py") + ":SmallCNN", "--input-shape",
                                  "2,3,8,8", "--batch-size", "4", "--devices", "cpu:2", "--placement", "stages:2",
                                  "--out", str(self.work / "x.py")],
                                 ["--placement", "--out", "--format", "--network", "--devices", "--batch-size",
                                  "--input-shape", "--model"]),
        }
        run(["optimize", "--network", net, "--devices", dev, "--algorithm", "ga", "--budget", "40", "--home",
             str(home), "--quiet"])  # run 1, for the runs and surrogate commands
        slow = {"train-policy", "benchmark", "export-placement"}  # seconds each when valid: a few of them
        for i in range(rounds):
            command = r.choice([c for c in options if c not in slow] if i % 25 else sorted(slow))
            base, opts = options[command]
            argv = command.split() + list(base)
            for _ in range(r.choice([1, 1, 1, 2, 3])):
                how = r.random()
                option = r.choice(opts)
                if how < 0.8:
                    argv += [option, r.choice(values)]  # argparse keeps the last: a hostile value in place
                elif how < 0.9:
                    argv += [option]  # a missing value, or a flag
                elif how < 0.95 and len(argv) > len(command.split()):
                    del argv[r.randrange(len(command.split()), len(argv))]
                else:
                    argv += [r.choice(values)]
            if command.startswith("experiment") and command != "experiment sharding":
                argv += ["--budget", "-1"]  # never a whole experiment: its usage is what is tested
            if command == "experiment sharding" and "--budget" in argv[3:]:
                argv += ["--budget", "10"]
            if "--workers" in argv:  # a valid worker count starts processes: keep it small
                i = argv.index("--workers")
                if i + 1 < len(argv) and argv[i + 1].isdigit() and 2 < int(argv[i + 1]) <= 1024:
                    argv[i + 1] = "2"
            for i, a in enumerate(argv[:-1]):  # valid values that only make a run long, as --seconds above
                cap, most = LONG.get((command, a), (None, None))
                n = _integer(argv[i + 1])
                if cap and n is not None and cap < n <= (most or n):
                    argv[i + 1] = str(cap)
            self.check(f"arguments: {command}", argv, home=home if command == "optimize" else None)

    def report(self, wall: float) -> int:
        total = sum(self.counts.values())
        print(f"inputs: {total:,}   exit 0: {self.counts['0']:,}   exit 2: {self.counts['2']:,}   "
              f"anything else: {self.counts['other']:,}   ({wall:.0f} s; exit 0 includes {self.doctor_found} "
              "`runs doctor` exits 3, its documented status for damage found)")
        width = max(len(f) for f in self.by_family)
        for family, c in sorted(self.by_family.items()):
            print(f"  {family:{width}s}  {sum(c.values()):6,}  exit 0 {c['0']:6,}  exit 2 {c['2']:6,}  "
                  f"else {c['other']:4,}")
        for what, argv, out, err in self.failures[:self.show]:
            print(f"\n{what}\n  argv: {' '.join(argv)[:400]}\n  stderr: {err.strip()[:600]}")
        return 0 if self.counts["other"] == 0 else 1


def _family_graph() -> dict:
    from placement_core.families import family_graphs
    from placement_core.formats.network import network_to_dict
    return network_to_dict(family_graphs("nmt", count=2, seed=0, split="test")[0].graph)


def main_campaign(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0, help="how many inputs: 1 is about 5,100")
    ap.add_argument("--show", type=int, default=10, help="failures shown in full")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="fuzz-campaign-") as tmp:
        tmp = Path(tmp)
        os.chdir(tmp)  # hostile values become relative output paths: they land here, never in the repository
        os.environ["PLACEMENT_HOME"] = str(tmp / "default-home")
        camp = Campaign(args.seed, tmp, args.show)
        k = args.scale
        camp.files(int(250 * k))
        camp.plans(int(200 * k))
        camp.policies(int(150 * k), tmp / "policy-home")
        camp.surrogates(int(200 * k), tmp / "surrogate-home")
        camp.stores(int(60 * k))
        camp.arguments(int(1000 * k), tmp / "args-home")
        os.chdir(cwd)
        return camp.report(time.perf_counter() - start)


if __name__ == "__main__":
    sys.exit(main_campaign())

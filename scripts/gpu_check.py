"""Every CUDA path of the project in one go, for the day a GPU is lent: a report under docs/gpu/.

    bash scripts/gpu-check.sh                      # on a machine with NVIDIA GPUs (about 5-8 minutes on one)
    bash scripts/gpu-check.sh --rehearse           # the same steps on two CPU ranks, to check the script itself

Each step is one `placement` command run as a user would run it, with its own timeout: import a model,
calibrate the devices, benchmark a single-device, a split and a sharded placement (the single one with a
profiled step written as a Chrome trace), a pipelined run, and a short E5 (simulated against measured).
A step that fails is reported with its last lines and the others still run. Without a CUDA GPU (and
without --rehearse) the script says so and exits 0 having written nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL, SHAPE, BATCH = "torchvision:resnet18", "2,3,32,32", "32"
GPT = "placement:gpt2(layers=4, d_model=256, heads=4, vocab=8192, seq=128)"
STEPS = ("import", "calibrate", "single", "split", "sharded", "pipeline", "e5")
# seconds a step may take: under 9 minutes in all even if every step hangs
TIMEOUTS = {"import": 45, "calibrate": 150, "single": 55, "split": 55, "sharded": 55, "pipeline": 55, "e5": 100}


def gpus() -> list[str]:
    """The CUDA devices torch sees, by name (none: an empty list, also when torch itself is missing)."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def device_sets(n_gpus: int, rehearse: bool) -> tuple[str, str]:
    """(two devices for the multi-device steps, the first device's local name)."""
    if rehearse:
        return "cpu:2", "cpu0"
    if n_gpus >= 2:
        return "cuda:0,cuda:1", "gpu0"
    return "cpu,cuda:0", "gpu0"  # one GPU: the host CPU is the second device, as in docs/e5.md's H100 run


def mixed(devices: str) -> bool:
    """One GPU paired with the host CPU: no two devices of one kind (E5 cannot split an op over them)."""
    return devices.startswith("cpu,")


def not_applicable(name: str, devices: str) -> str | None:
    """Why a step cannot run on these devices (None: it can)."""
    if name == "pipeline" and "cuda" in devices:
        return ("pipelined benchmarks run on CPU ranks only (gloo cannot send CUDA tensors; GPU stages would "
                "need NCCL and a GPU per stage): docs/torch.md, Limits")
    return None


def commands(work: Path, devices: str, first: str) -> dict[str, list[str]]:
    net, cal = work / "resnet18.json", work / "cal"
    bench = ["benchmark", "--model", MODEL, "--input-shape", SHAPE, "--batch-size", BATCH, "--devices", devices,
             "--network", str(net), "--steps", "10", "--warmup", "3", "--no-store", "--json"]
    return {
        "import": ["import-model", MODEL, "--input-shape", SHAPE, "--batch-size", BATCH, "--out", str(net)],
        "calibrate": ["calibrate", "--model", MODEL, "--input-shape", SHAPE, "--batch-size", BATCH,
                      "--devices", devices, "--out", str(cal), "--steps", "5", "--rounds", "1",
                      "--max-transfer", "10MB", "--json"],
        "single": bench + ["--placement", f"single:{first}", "--profile", str(work / "profile")],
        "split": bench + ["--placement", "random:1"],
        "sharded": bench + ["--placement", str(work / "sharded.json")],
        "pipeline": ["benchmark", "--model", GPT, "--input-shape", "8,128", "--devices", devices, "--schedule", "1f1b",
                     "--micro-batches", "4", "--placement", "stages:2", "--steps", "5", "--warmup", "2",
                     "--no-store", "--json"],
        "e5": ["experiment", "e5", "--model", MODEL, "--input-shape", SHAPE, "--batch-size", BATCH,
               "--devices", devices, "--calibration", str(cal), "--out", str(work / "e5"), "--generations", "4",
               "--random", "4", "--zones", "2", "--splits", "2", "--sharded", "0" if mixed(devices) else "2", "--steps", "5", "--json"],
    }


def sharded_placement(work: Path, devices: str) -> None:
    """The network's first convolution split by batch over both devices, the rest on the first."""
    net = json.loads((work / "resnet18.json").read_text())
    from placement_core.torch.devspec import parse_devices  # torch-free: the names `--devices` gives
    names = [d.name for d in parse_devices(devices)]
    ops = [op["name"] for op in net["ops"]]
    conv = next(op["name"] for op in net["ops"] if op.get("kind") == "conv")
    assignment = {name: names[0] for name in ops}
    assignment[conv] = {"devices": names, "split": "batch"}
    (work / "sharded.json").write_text(json.dumps({"format": "placement/1", "network": net.get("name", "resnet18"),
                                                   "assignment": assignment}))


def run_step(name: str, argv: list[str], timeout: float, env: dict) -> dict:
    cmd = [str(ROOT / ".venv" / "bin" / "placement") if (ROOT / ".venv" / "bin" / "placement").exists()
           else shutil.which("placement") or "placement"] + argv
    start = time.monotonic()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
        code, stdout, stderr = out.returncode, out.stdout, out.stderr
    except subprocess.TimeoutExpired as e:
        code, stdout, stderr = "timeout", (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) \
            else (e.stdout or ""), f"stopped after {timeout:g} s"
    seconds = time.monotonic() - start
    return {"step": name, "command": "placement " + shlex.join(argv), "exit": code, "seconds": round(seconds, 1),
            "stdout": stdout, "stderr": stderr}


def figures(step: dict) -> str:
    """The step's headline numbers, read from its JSON output (empty when there is none)."""
    try:
        data = json.loads(step["stdout"])
    except (ValueError, TypeError):
        return ""
    if step["step"] in ("single", "split", "sharded", "pipeline"):
        r = data if "median_step_s" in data else (data.get("results") or [{}])[0]
        peaks = r.get("peak_memory_bytes") or {}
        text = f"median step {r.get('median_step_s')} s, status {r.get('status')}"
        text += "".join(f"; peak {d} {b / 1e6:.1f} MB" for d, b in peaks.items() if b)
        if r.get("profiles"):
            text += f"; profiled step: {', '.join(Path(p).name for p in r['profiles'])}"
        if r.get("pipeline"):
            text += f"; bubble {r['pipeline'].get('measured_bubble')}"
        return text
    if step["step"] == "e5":
        m = data.get("metrics") or data
        return json.dumps(m)[:400]
    if step["step"] == "calibrate":
        return json.dumps({k: data[k] for k in list(data)[:6]})[:400]
    return ""


def report(path: Path, env_lines: list[str], results: list[dict], rehearse: bool) -> None:
    lines = ["# GPU check" + (" (rehearsal on CPU ranks)" if rehearse else ""), "",
             f"Written by `bash scripts/gpu-check.sh{' --rehearse' if rehearse else ''}` on "
             f"{datetime.date.today().isoformat()}. Each step is the command shown, run from the repository.", "",
             "## Machine", ""] + [f"- {x}" for x in env_lines] + ["", "## Steps", "",
             "| step | exit | seconds | figures |", "|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['step']} | {r['exit']} | {r['seconds']} | {figures(r).replace('|', '/')} |")
    for r in results:
        lines += ["", f"### {r['step']}", "", "```", r["command"], "```"]
        if r["exit"] == "n/a":
            lines += ["", f"Not run here: {r['stderr']}"]
        elif r["exit"] != 0:
            tail = (r["stderr"] or r["stdout"]).strip().splitlines()[-12:]
            lines += ["", "Last lines:", "", "```"] + tail + ["```"]
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu-check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rehearse", action="store_true", help="run the steps on two CPU ranks (no GPU needed)")
    ap.add_argument("--out", default=None, help="report folder (default docs/gpu, docs/gpu-rehearsal with --rehearse)")
    ap.add_argument("--only", default=",".join(STEPS), help="steps to run, comma-separated: " + ",".join(STEPS))
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds per step (default: each step's own, 60 to 120 s; a rehearsal on CPU ranks "
                         "needs about 3 times as long)")
    args = ap.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in only if s not in STEPS]
    if unknown:
        print(f"error: --only: unknown step {unknown[0]!r}. Use some of: {', '.join(STEPS)}", file=sys.stderr)
        return 2
    names = gpus()
    if not names and not args.rehearse:
        print("gpu-check: no CUDA GPU here (torch sees none), so there is nothing to check; the report is written "
              "on a machine with one (or use --rehearse to run the steps on CPU ranks)")
        return 0
    devices, first = device_sets(len(names), args.rehearse)
    out = Path(args.out) if args.out else ROOT / "docs" / ("gpu-rehearsal" if args.rehearse else "gpu")
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    slug = re.sub(r"[^a-z0-9]+", "-", (names[0] if names else "cpu").lower()).strip("-")
    work = out / f"{stamp}-{slug}"
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PLACEMENT_HOME": str(work / "home")}
    env_lines = [f"GPUs: {', '.join(names) if names else 'none (rehearsal)'}", f"devices used: {devices}",
                 f"Python {platform.python_version()} on {platform.platform()}", f"CPU cores: {os.cpu_count()}"]
    try:
        import torch
        env_lines.append(f"torch {torch.__version__}, CUDA {torch.version.cuda}")
    except ImportError:
        env_lines.append("torch: not installed")
    smi = shutil.which("nvidia-smi")
    if smi:
        q = subprocess.run([smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True)
        env_lines += [f"nvidia-smi: {line}" for line in q.stdout.strip().splitlines()]
    cmds = commands(work, devices, first)
    results, started = [], time.monotonic()
    for name in STEPS:
        if name not in only:
            continue
        if name == "sharded":
            if not (work / "resnet18.json").exists():
                results.append({"step": name, "command": "(needs the import step)", "exit": "skipped",
                                "seconds": 0, "stdout": "", "stderr": "the import step made no network"})
                continue
            sharded_placement(work, devices)
        why = not_applicable(name, devices)
        if why:
            results.append({"step": name, "command": "placement " + shlex.join(cmds[name]), "exit": "n/a",
                            "seconds": 0, "stdout": "", "stderr": why})
            continue
        if name == "e5" and not (work / "cal" / "devices.json").exists():
            results.append({"step": name, "command": "(needs the calibrate step)", "exit": "skipped",
                            "seconds": 0, "stdout": "", "stderr": "the calibrate step wrote no calibration"})
            continue
        print(f"gpu-check: {name} …", flush=True)
        limit = args.timeout or TIMEOUTS[name] * (3 if args.rehearse else 1)
        results.append(run_step(name, cmds[name], limit, env))
        print(f"gpu-check: {name}: exit {results[-1]['exit']} in {results[-1]['seconds']} s", flush=True)
        # after every step: a check stopped from outside (a lease's end) still leaves what it measured
        report(work / "report.md", env_lines, results, args.rehearse)
        (work / "steps.json").write_text(json.dumps(results, indent=1))
    report(work / "report.md", env_lines, results, args.rehearse)
    (work / "steps.json").write_text(json.dumps(results, indent=1))
    shutil.rmtree(work / "home", ignore_errors=True)
    print(f"gpu-check: {len(results)} step(s) in {time.monotonic() - started:.0f} s; report: {work / 'report.md'}")
    return 0 if all(r["exit"] in (0, "n/a") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

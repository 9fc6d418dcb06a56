"""The GPU compute model held against one real GPU: matmuls and whole GPT training steps in bf16.

Two halves, so that the GPU's minutes go to measuring only:

    python benchmarks/gpu_compute.py measure --out compute.json          # on the GPU machine (torch, CUDA)
    python benchmarks/gpu_compute.py predict compute.json [--gpu h200]   # anywhere: the simulator's figures

``measure`` times (CUDA events, after warm-up) the forward GEMMs of GPT layers (QKV, projection, MLP up and
down, the attention's two batched matmuls) and whole forward+backward steps of small GPTs written op for op
as the ``gpt:`` family describes them (explicit attention scores, softmax, GELU MLP, pre-norm, tied logits,
cross-entropy), all in bf16. ``predict`` gives, for the same shapes, what the project predicts from the
datasheet and the public matmul microbenchmark the presets carry: a GEMM's time from the default profile's
roofline (the measured best bf16 rate where the GPU has one, else 0.9 of the dense bf16 peak, times
cost/gemm.py's tile/wave share), and a step's
time from ``placement simulate`` of the same ``gpt:`` network on one GPU (single placement, bf16). Nothing
is fitted to the measurement; the ratio measured / predicted is the model's error, reported as is
(docs/clusters.md, "Held against one GPU"). ``--device cpu --dtype float32 --small`` runs the measuring
half on a CPU, to test the script.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from placement_core.formats.clusters import KINDS  # noqa: E402

# (hidden, tokens = micro-batch x sequence): GPT layers from GPT-2 medium to GPT-3 175B's width
GEMM_SHAPES = ((1024, 2048), (2048, 2048), (4096, 2048), (8192, 2048), (12288, 2048), (4096, 8192))
HEAD_DIM, ATTN_SEQ = 128, 2048
# (layers, hidden, heads, seq, vocab, micro-batch): whole steps a single GPU holds in bf16
STEPS = ((4, 1024, 16, 1024, 51200, 8), (4, 2048, 16, 2048, 51200, 2), (2, 4096, 32, 2048, 51200, 1))
SMALL_GEMMS, SMALL_STEPS = ((256, 128),), ((2, 128, 4, 64, 1000, 2),)


def _gpu(kind, model: str | None = None, memory_bytes: float | None = None, mem_bandwidth: float | None = None):
    """One GPU of a cluster preset (formats/clusters.py: datasheet figures and the measured matmul rate that
    replaces 0.9 of the peak since 29 November 2026) as a device entry."""
    return {"name": "gpu0", "kind": "gpu", "model": model or kind.gpu, "peak_flops": kind.peak_fp32,
            "peak_flops_by_precision": {"bf16": kind.peak_half, "fp16": kind.peak_half},
            "achieved_flops_by_precision": {"bf16": kind.achieved_half, "fp16": kind.achieved_half},
            "memory_bytes": memory_bytes or kind.memory_bytes, "mem_bandwidth": mem_bandwidth or kind.mem_bandwidth,
            "sms": kind.sms}


# the GPU that is measured (docs/clusters.md names the sources)
GPUS = {
    # NVIDIA H200 Tensor Core GPU datasheet (SXM: 141 GB HBM3e at 4.8 TB/s; the tensor-core rates and the 132
    # SMs are the H100 SXM5's)
    "h200": _gpu(KINDS["dgx-h100"], "NVIDIA H200", 141e9, 4.8e12),
    "h100": _gpu(KINDS["dgx-h100"]),
}


# ---------------------------------------------------------------- measuring (torch)

def _timer(device: str):
    """A function that times ``fn`` ``reps`` times after ``warmup`` runs: the median seconds."""
    import torch

    def run(fn, reps: int, warmup: int = 3) -> float:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(reps):
            if device.startswith("cuda"):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                torch.cuda.synchronize()
                times.append(a.elapsed_time(b) / 1e3)
            else:
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
        return statistics.median(times)
    return run


def gemm_cases(small: bool) -> list[dict]:
    """(name, batch, m, n, k) of each forward GEMM: x[m, k] · W[k, n], or a batched matmul."""
    cases = []
    for hidden, tokens in (SMALL_GEMMS if small else GEMM_SHAPES):
        for name, n, k in (("qkv", 3 * hidden, hidden), ("proj", hidden, hidden), ("fc1", 4 * hidden, hidden),
                           ("fc2", hidden, 4 * hidden)):
            cases.append({"name": f"{name} H={hidden} T={tokens}", "batch": 1, "m": tokens, "n": n, "k": k})
    seq = 64 if small else ATTN_SEQ
    for heads in ((2,) if small else (16, 32, 64)):
        cases.append({"name": f"scores a={heads} s={seq}", "batch": heads, "m": seq, "n": seq, "k": HEAD_DIM})
        cases.append({"name": f"context a={heads} s={seq}", "batch": heads, "m": seq, "n": HEAD_DIM, "k": seq})
    return cases


def measure_gemms(device: str, dtype, small: bool) -> list[dict]:
    import torch
    timed = _timer(device)
    out = []
    for c in gemm_cases(small):
        if c["batch"] == 1:
            a = torch.randn(c["m"], c["k"], device=device, dtype=dtype)
            w = torch.randn(c["n"], c["k"], device=device, dtype=dtype)
            s = timed(lambda: torch.nn.functional.linear(a, w), reps=20)
        else:
            a = torch.randn(c["batch"], c["m"], c["k"], device=device, dtype=dtype)
            b = torch.randn(c["batch"], c["k"], c["n"], device=device, dtype=dtype)
            s = timed(lambda: torch.bmm(a, b), reps=20)
        flops = 2.0 * c["batch"] * c["m"] * c["n"] * c["k"]
        out.append({**c, "seconds": s, "tflops": flops / s / 1e12})
        print(f"  {c['name']:<28} {s * 1e6:9.1f} us {flops / s / 1e12:7.1f} TFLOP/s", flush=True)
    return out


def gpt_model(layers: int, hidden: int, heads: int, seq: int, vocab: int):
    """The ``gpt:`` family's ops as torch modules (explicit attention, as the family counts it). With
    ``model.marks`` a list, the forward records a CUDA event pair around each op under the family's op
    name (l0.qkv, l0.scores, ...), so that its forward time can be set beside the simulator's."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    def op(model, name, fn, *args):
        if model.marks is None:
            return fn(*args)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        out = fn(*args)
        b.record()
        model.marks.append((name, a, b))
        return out

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
            self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

        def forward(self, x, m, p):
            B, S, H = x.shape
            q, k, v = op(m, p + "qkv", self.qkv, op(m, p + "ln1", self.ln1, x)).split(H, dim=2)
            q, k, v = (t.unflatten(-1, (heads, H // heads)).transpose(1, 2) for t in (q, k, v))
            scores = op(m, p + "scores", lambda: torch.matmul(q, k.transpose(-1, -2)) * (H // heads) ** -0.5)
            probs = op(m, p + "softmax", torch.softmax, scores, -1)
            ctx = op(m, p + "context", lambda: torch.matmul(probs, v).transpose(1, 2).flatten(2))
            x = op(m, p + "add1", torch.add, x, op(m, p + "proj", self.proj, ctx))
            up = op(m, p + "fc1", self.fc1, op(m, p + "ln2", self.ln2, x))
            down = op(m, p + "fc2", self.fc2, op(m, p + "gelu", F.gelu, up))
            return op(m, p + "add2", torch.add, x, down)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, hidden), nn.Embedding(seq, hidden)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.ln_f = nn.LayerNorm(hidden)
            self.marks = None

        def forward(self, tokens, targets):
            x = op(self, "embed", lambda: self.tok(tokens) + self.pos.weight[: tokens.shape[1]])
            for i, layer in enumerate(self.layers):
                x = layer(x, self, f"l{i}.")
            logits = op(self, "logits", F.linear, op(self, "ln_f", self.ln_f, x), self.tok.weight)  # tied
            return op(self, "loss", lambda: F.cross_entropy(logits.flatten(0, 1), targets.flatten()))

    return GPT()


def forward_op_times(model, tokens, targets, reps: int = 10) -> dict[str, float]:
    """Median forward seconds per op over ``reps`` training forwards (CUDA events around each op)."""
    import torch
    per: dict[str, list[float]] = {}
    for _ in range(reps):
        model.marks = []
        model.zero_grad(set_to_none=True)
        loss = model(tokens, targets)
        torch.cuda.synchronize()
        for name, a, b in model.marks:
            per.setdefault(name, []).append(a.elapsed_time(b) / 1e3)
        loss.backward()
    model.marks = None
    return {name: statistics.median(v) for name, v in per.items()}


def measure_steps(device: str, dtype, small: bool) -> list[dict]:
    import torch
    timed = _timer(device)
    out = []
    for layers, hidden, heads, seq, vocab, batch in (SMALL_STEPS if small else STEPS):
        model = gpt_model(layers, hidden, heads, seq, vocab).to(device=device, dtype=dtype)
        tokens = torch.randint(0, vocab, (batch, seq), device=device)
        targets = torch.randint(0, vocab, (batch, seq), device=device)

        def step():
            model.zero_grad(set_to_none=True)
            model(tokens, targets).backward()

        s = timed(step, reps=10)
        spec = f"gpt:layers={layers},hidden={hidden},heads={heads},seq={seq},vocab={vocab}"
        cuda = device.startswith("cuda")
        peak = torch.cuda.max_memory_allocated() if cuda else None
        ops = forward_op_times(model, tokens, targets) if cuda else {}
        out.append({"network": spec, "batch": batch, "seconds": s, "peak_memory_bytes": peak,
                    "forward_op_s": ops})
        print(f"  {spec} batch {batch}: {s * 1e3:.2f} ms", flush=True)
        del model
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    return out


def measure(args) -> int:
    import torch
    dtype = getattr(torch, args.dtype)
    info = {"device": args.device, "dtype": args.dtype, "torch": torch.__version__}
    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            print("gpu_compute: no CUDA GPU here; use --device cpu --dtype float32 --small to test the script")
            return 2
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=p.name, sms=p.multi_processor_count, memory_bytes=p.total_memory, cuda=torch.version.cuda)
    print(f"gpu_compute: {info}", flush=True)
    data = {"info": info, "gemms": measure_gemms(args.device, dtype, args.small),
            "steps": measure_steps(args.device, dtype, args.small)}
    Path(args.out).write_text(json.dumps(data, indent=1))
    print(f"gpu_compute: wrote {args.out}")
    return 0


# ---------------------------------------------------------------- predicting (no torch)

def predict_gemm(c: dict, gpu: dict) -> float:
    """The default profile's roofline for one GEMM: flops at the GPU's measured bf16 matmul rate (else its share
    of the bf16 peak) times the share of computed tiles that is useful (cost/gemm.py), or its bytes (inputs and
    output, 2 each) at the whole HBM bandwidth, whichever is longer; nothing fitted to this measurement."""
    from placement_core.cost.gemm import efficiency
    from placement_core.cost.profiles import get_profile
    rate = (gpu.get("achieved_flops_by_precision", {}).get("bf16")
            or get_profile("default").comp_efficiency * gpu["peak_flops_by_precision"]["bf16"])
    b, m, n, k = c["batch"], c["m"], c["n"], c["k"]
    compute = 2.0 * b * m * n * k / (rate * efficiency(b, m, n, gpu["sms"]))
    weights = k * n if b == 1 else b * k * n
    memory = 2.0 * (b * m * k + weights + b * m * n) / gpu["mem_bandwidth"]
    return max(compute, memory)


def predicted_forward(step: dict, gpu: dict) -> dict[str, float]:
    """The default profile's forward time of each op of the network on the GPU (what the simulator runs)."""
    from placement_core.formats.catalog import load_network
    from placement_core.model.devices import devices_from_dict
    from placement_core.problem import Problem
    graph = load_network(step["network"], batch_size=step["batch"]).with_precision("bf16")
    devices = devices_from_dict({"format": "placement-devices/1", "name": "one GPU", "devices": [gpu]})
    fwd = Problem(graph, devices).costs.fwd[:, 0]
    return {op.name: float(t) for op, t in zip(graph.ops, fwd)}


def by_kind(measured: dict[str, float], predicted: dict[str, float]) -> dict[str, tuple[float, float]]:
    """Forward seconds summed over the layers by op kind (qkv, scores, ...): (measured, predicted)."""
    out: dict[str, list[float]] = {}
    for name, t in measured.items():
        kind = name.split(".", 1)[-1]
        m, p = out.setdefault(kind, [0.0, 0.0])
        out[kind] = [m + t, p + predicted.get(name, 0.0)]
    return {k: (m, p) for k, (m, p) in out.items()}


def predict_step(step: dict, gpu: dict) -> float:
    """``placement simulate`` of the same network on one GPU, bf16, every op on it: the time per batch."""
    with tempfile.TemporaryDirectory() as tmp:
        dev = Path(tmp) / "gpu.json"
        dev.write_text(json.dumps({"format": "placement-devices/1", "name": f"one {gpu['model']}",
                                   "devices": [gpu]}))
        out = subprocess.run([sys.executable, "-m", "placement_core", "simulate", "--network", step["network"],
                              "--batch-size", str(step["batch"]), "--devices", str(dev), "--placement",
                              "single:gpu0", "--precision", "bf16", "--json"],
                             capture_output=True, text=True, cwd=ROOT)
        if out.returncode:
            raise SystemExit(f"placement simulate failed: {out.stderr.strip()[-400:]}")
        return json.loads(out.stdout)["batch_time_s"]


def predict(args) -> int:
    data = json.loads(Path(args.file).read_text())
    gpu = GPUS[args.gpu]
    rows = {"gpu": args.gpu, "measured_on": data["info"], "gemms": [], "steps": []}
    print(f"measured on {data['info'].get('gpu', data['info']['device'])}, predicted for {gpu['model']} "
          f"(datasheet only)\n")
    print(f"{'GEMM':<28} {'measured':>11} {'predicted':>11} {'meas/pred':>9}")
    for c in data["gemms"]:
        p = predict_gemm(c, gpu)
        rows["gemms"].append({**c, "predicted_s": p, "ratio": c["seconds"] / p})
        print(f"{c['name']:<28} {c['seconds'] * 1e6:9.1f}us {p * 1e6:9.1f}us {c['seconds'] / p:9.2f}")
    print(f"\n{'training step (fwd+bwd)':<62} {'measured':>9} {'predicted':>9} {'meas/pred':>9}")
    for s in data["steps"]:
        p = predict_step(s, gpu)
        row = {**s, "predicted_s": p, "ratio": s["seconds"] / p}
        print(f"{s['network'] + ' b=' + str(s['batch']):<62} {s['seconds'] * 1e3:7.2f}ms {p * 1e3:7.2f}ms "
              f"{s['seconds'] / p:9.2f}")
        if s.get("forward_op_s"):
            kinds = by_kind(s["forward_op_s"], predicted_forward(s, gpu))
            row["forward_by_kind"] = {k: {"measured_s": m, "predicted_s": q} for k, (m, q) in kinds.items()}
            fm, fp = sum(m for m, _ in kinds.values()), sum(q for _, q in kinds.values())
            print(f"    forward {fm * 1e3:.2f} ms measured, {fp * 1e3:.2f} predicted; by op kind, measured/predicted: "
                  + ", ".join(f"{k} {m / q:.2f}" for k, (m, q) in kinds.items() if q > 0))
        rows["steps"].append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="time the GEMMs and GPT steps (torch; a CUDA GPU unless --device cpu)")
    m.add_argument("--out", required=True)
    m.add_argument("--device", default="cuda")
    m.add_argument("--dtype", default="bfloat16")
    m.add_argument("--small", action="store_true", help="tiny shapes (to test the script on a CPU)")
    p = sub.add_parser("predict", help="the simulator's figures for a measure file, side by side")
    p.add_argument("file")
    p.add_argument("--gpu", choices=sorted(GPUS), default="h200", help="the datasheet to predict from")
    p.add_argument("--json", help="also write the table as JSON here")
    args = ap.parse_args(argv)
    return measure(args) if args.cmd == "measure" else predict(args)


if __name__ == "__main__":
    sys.exit(main())

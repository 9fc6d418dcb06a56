"""The importer on what transformers and recurrent models need, each checked on a model written here:
shared weights counted once, LSTM/GRU FLOPs, token-id inputs, embeddings, attention, layer norm, the B/W
split, and coarsening that keeps a shared module's calls together."""

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from placement_core.model.coarsen import coarsen, expand_assignment  # noqa: E402
from placement_core.torch.model_import import trace_model  # noqa: E402


def param_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())  # parameters() yields each once


class TwiceCalled(nn.Module):
    """One Linear applied twice, with an op in between (a shared module)."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(16, 32)
        self.shared = nn.Linear(32, 32)
        self.out = nn.Linear(32, 4)

    def forward(self, x):
        h = self.shared(torch.relu(self.inp(x)))
        h = self.shared(torch.tanh(h))
        return self.out(h)


@pytest.mark.slow
def test_a_module_called_twice_has_its_weights_counted_once():
    model = TwiceCalled()
    g = trace_model(model, (2, 16)).graph
    assert sum(o.param_bytes for o in g.ops) == param_bytes(model) == (16 * 32 + 32 + 32 * 32 + 32 + 32 * 4 + 4) * 4
    assert g.op("shared").param_bytes == (32 * 32 + 32) * 4 and g.op("shared#2").param_bytes == 0
    # the second call still computes: its FLOPs are its own
    assert g.op("shared#2").fwd_flops == g.op("shared").fwd_flops == 2 * 2 * 32 * 32


class Tied(nn.Module):
    """A head sharing its weight with the embedding (GPT-2's tying), fed token ids."""

    def __init__(self, vocab=50, d=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, idx):
        return self.head(self.norm(self.emb(idx)))


def test_a_tied_weight_is_counted_once_and_token_ids_feed_the_embedding():
    model = Tied()
    traced = trace_model(model, (3, 5))  # token ids: an embedding cannot read random floats
    g = traced.graph
    assert sum(o.param_bytes for o in g.ops) == param_bytes(model) == (50 * 8 + 2 * 8) * 4
    assert g.op("emb").kind == "embedding" and g.op("emb").param_bytes == 50 * 8 * 4 and g.op("head").param_bytes == 0
    assert g.op("emb").output_bytes == 3 * 5 * 8 * 4
    assert g.op("norm").kind == "norm" and g.op("norm").fwd_flops == 4 * 3 * 5 * 8
    assert g.op("head").fwd_flops == 2 * 3 * 5 * 8 * 50
    # an embedding's backward is all weight gradient (the ids have none)
    assert g.op("emb").bwd_weight_flops == g.op("emb").bwd_flops
    from placement_core.torch.fx_import import example_input, token_vocabulary
    assert token_vocabulary(traced.gm) == 50
    x = example_input(traced.gm, (3, 5))
    assert x.dtype == torch.int64 and 0 <= int(x.min()) and int(x.max()) < 50


class Recurrent(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.rnn = cell(input_size=32, hidden_size=64, num_layers=2, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(128, 10)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.fc(out)


@pytest.mark.parametrize("cell, gates", [(nn.LSTM, 4), (nn.GRU, 3), (nn.RNN, 1)])
def test_recurrent_layers_get_their_real_flops(cell, gates):
    """Per time step, sample and direction: gates x hidden x (input + hidden) multiply-adds and two biases;
    the second layer reads both directions (2 x 64). Batch 4, 10 steps."""
    g = trace_model(Recurrent(cell), (4, 10, 32)).graph
    layer1 = 2 * gates * 64 * (32 + 64) + 2 * gates * 64
    layer2 = 2 * gates * 64 * (128 + 64) + 2 * gates * 64
    op = g.op("rnn")
    assert op.kind == "recurrent"
    assert op.fwd_flops == 4 * 10 * 2 * (layer1 + layer2)
    # e.g. the LSTM: 4 * 10 * 2 * (4 * 128 * 96 + 512 + 4 * 128 * 192 + 512) = 11,878,400 FLOP, not an element count
    # it reads the model's input, which needs no gradient: its whole backward is weight gradient (W)
    assert op.bwd_flops == op.fwd_flops and op.bwd_weight_flops == op.fwd_flops
    assert op.param_bytes == param_bytes(cell(32, 64, num_layers=2, bidirectional=True))


class Attention(nn.Module):
    """Causal self-attention written out: a fused QKV projection, split into heads, SDPA, projection."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        q, k, v = self.qkv(x).split(x.shape[-1], dim=2)
        q, k, v = (t.unflatten(-1, (self.heads, -1)).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).flatten(2))


def test_attention_flops_and_views():
    """Q Kᵀ and the weighted sum of V, counted in full: 2 x (2 x batch x heads x T x T x head size);
    the split and head reshapes are views (no FLOPs, no traffic)."""
    g = trace_model(Attention(), (3, 10, 16)).graph
    sdpa = g.op("scaled_dot_product_attention")
    assert sdpa.kind == "attention" and sdpa.fwd_flops == 2 * (2 * 3 * 2 * 10 * 10 * 8)
    assert sdpa.bwd_flops == 2 * sdpa.fwd_flops and sdpa.weight_grad_share == 0  # no weights: no W
    assert all(o.kind == "reshape" and o.fwd_flops == 0 and o.mem_bytes == 0
               for o in g.ops if o.name.startswith(("split", "unflatten", "transpose", "flatten")))
    # a linear layer's weight gradient costs its forward: written only where the default (half) would be wrong
    assert g.op("proj").bwd_weight_flops is None and g.op("proj").weight_grad_share == 0.5
    assert g.op("qkv").bwd_flops == g.op("qkv").fwd_flops  # reads the input: no input gradient
    assert g.op("qkv").bwd_weight_flops == g.op("qkv").fwd_flops and g.op("qkv").weight_grad_share == 1.0


def test_multihead_attention_module_flops():
    """nn.MultiheadAttention: Q, K, V and output projections (4 x 2 x T x d x d) plus attention (4 x T x T x d)."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = nn.MultiheadAttention(16, 4, batch_first=True)

        def forward(self, x):
            return self.mha(x, x, x, need_weights=False)[0]
    g = trace_model(M(), (2, 6, 16)).graph
    assert g.op("mha").kind == "attention"
    assert g.op("mha").fwd_flops == 2 * (4 * 2 * 6 * 16 * 16 + 4 * 6 * 6 * 16)


def test_coarsening_keeps_the_calls_of_a_shared_module_together():
    """Any number of groups: shared and shared#2 (and the tanh between them) share a group, so every
    group placement expands to an assignment the ranks runner accepts."""
    from placement_core.torch.apply import node_devices, shared_module_conflicts
    model = TwiceCalled()
    traced = trace_model(model, (2, 16))
    for k in range(2, len(traced.graph)):
        try:
            coarse, groups = coarsen(traced.graph, k)
        except Exception:  # noqa: BLE001 - fewer groups than the merged hull allows
            continue
        owner = {m: gname for gname, ms in groups.items() for m in ms}
        assert owner["shared"] == owner["shared#2"] == owner["tanh"]
        for split in range(len(coarse)):  # every contiguous two-device split of the groups
            assignment = expand_assignment({o.name: ("a" if i < split else "b") for i, o in enumerate(coarse.ops)},
                                           groups)
            shared_module_conflicts(traced.gm, node_devices(traced.gm, traced.node_op, assignment))


@pytest.mark.slow
def test_gpt2_is_gpt2_small():
    """Our GPT-2: 124,439,808 parameters with the tied head; forward per token 2 x (every weight but the
    embeddings, plus the head) + full attention 4 x layers x T x d."""
    from placement_core.torch.gpt2 import gpt2
    model = gpt2(layers=2, d_model=64, heads=4, vocab=500, seq=32)
    g = trace_model(model, (2, 32)).graph
    d, layers, vocab, t = 64, 2, 500, 32
    block = 4 * d * d + 4 * d + 2 * 4 * d * d + 5 * d + 4 * d  # attention, MLP, two layer norms
    assert sum(o.param_bytes for o in g.ops) == param_bytes(model) == 4 * (vocab * d + 32 * d + layers * block + 2 * d)
    matmuls = sum(o.fwd_flops for o in g.ops if o.kind in ("linear", "attention"))
    weights = layers * 12 * d * d + vocab * d
    assert matmuls == 2 * 32 * (2 * weights + 4 * layers * t * d)
    full = sum(p.numel() for p in gpt2().parameters())
    assert full == 124_439_808

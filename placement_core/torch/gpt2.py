"""GPT-2 (Radford et al., 2019), defined here so that nothing is downloaded: ``placement:gpt2``.

GPT-2 small by default: 12 layers, d = 768, 12 heads, a vocabulary of 50,257, sequences of 1,024 tokens,
the output head tied to the token embedding (124,439,808 parameters). Pre-norm blocks: x + attn(ln(x)),
then x + mlp(ln(x)) with a 4 d GELU MLP; causal attention with ``F.scaled_dot_product_attention``. The
input is token ids ``[batch, sequence]`` (any length up to ``seq``); the output the logits
``[batch, sequence, vocab]``. It traces with torch.fx (no data-dependent Python), so the importer sees
one op per module call and per function between them. Smaller variants (``layers=4, d_model=256``)
are what a CPU can pipeline for real.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, heads: int):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} is not a multiple of heads {heads}")
        self.heads = heads
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        d = x.shape[-1]
        q, k, v = self.c_attn(x).split(d, dim=2)
        # [batch, seq, d] -> [batch, heads, seq, d / heads]
        q = q.unflatten(-1, (self.heads, d // self.heads)).transpose(1, 2)
        k = k.unflatten(-1, (self.heads, d // self.heads)).transpose(1, 2)
        v = v.unflatten(-1, (self.heads, d // self.heads)).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).flatten(2))


class MLP(nn.Module):
    def __init__(self, d_model: int):
        super().__init__()
        self.c_fc = nn.Linear(d_model, 4 * d_model)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """GPT-2; ``tie=False`` gives the head its own weight (a pipeline can then split them freely)."""

    def __init__(self, layers: int = 12, d_model: int = 768, heads: int = 12, vocab: int = 50257, seq: int = 1024,
                 tie: bool = True):
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(seq, d_model)
        self.h = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        if tie:
            self.lm_head.weight = self.wte.weight
        self.apply(self._init)

    @staticmethod
    def _init(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def gpt2(layers: int = 12, d_model: int = 768, heads: int = 12, vocab: int = 50257, seq: int = 1024,
         tie: bool = True) -> GPT2:
    return GPT2(layers=layers, d_model=d_model, heads=heads, vocab=vocab, seq=seq, tie=tie)


MODELS = {"gpt2": gpt2}

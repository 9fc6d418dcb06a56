"""What kind of op an fx node or a module is (the kinds of docs/formats.md), for the importers."""

from __future__ import annotations

import operator

import torch
import torch.fx
from torch import nn

_VIEW_FUNCS = {torch.flatten, torch.reshape, torch.squeeze, torch.unsqueeze, torch.transpose, torch.permute,
               torch.split, torch.chunk, torch.unbind, torch.narrow, torch.unflatten}
_VIEW_METHODS = {"view", "reshape", "flatten", "squeeze", "unsqueeze", "transpose", "permute", "expand",
                 "contiguous", "view_as", "t", "split", "chunk", "unflatten", "unbind", "narrow"}
_ELEMENTWISE_FUNCS = {operator.add, operator.mul, operator.sub, operator.truediv, operator.iadd, operator.imul,
                      torch.add, torch.mul, torch.sub, torch.div}
_ACTIVATION_FUNCS = {torch.relu, torch.sigmoid, torch.tanh, nn.functional.relu, nn.functional.gelu,
                     nn.functional.silu, nn.functional.sigmoid, nn.functional.hardswish, nn.functional.hardsigmoid}
_POOL_FUNCS = {nn.functional.adaptive_avg_pool2d, nn.functional.adaptive_max_pool2d, nn.functional.avg_pool2d,
               nn.functional.max_pool2d, torch.nn.functional.adaptive_avg_pool1d}
_CONCAT_FUNCS = {torch.cat, torch.concat, torch.stack}


def module_kind(mod: nn.Module) -> str:
    if isinstance(mod, (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)):
        return "deconv"
    if isinstance(mod, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
        return "conv"
    if isinstance(mod, nn.Linear):
        return "linear"
    if isinstance(mod, (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d,
                        nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d, nn.AdaptiveMaxPool2d)):
        return "pool"
    if isinstance(mod, (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm)):
        return "norm"
    if isinstance(mod, (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout)):
        return "dropout"
    if isinstance(mod, (nn.Softmax, nn.LogSoftmax)):
        return "softmax"
    if isinstance(mod, (nn.Flatten, nn.Unflatten, nn.Identity)):
        return "reshape"
    if isinstance(mod, nn.Embedding):
        return "embedding"
    if isinstance(mod, nn.MultiheadAttention):
        return "attention"
    if isinstance(mod, nn.RNNBase):
        return "recurrent"
    if isinstance(mod, (nn.Upsample, nn.UpsamplingNearest2d, nn.UpsamplingBilinear2d)):
        return "upsample"
    if type(mod).__module__.startswith("torch.nn.modules.activation"):
        return "activation"
    return "other"


# Kinds of ATen operators, which is what a torch.export graph is made of.
_ATEN_KINDS = {
    "conv": ("conv1d", "conv2d", "conv3d", "convolution", "_convolution", "mkldnn_convolution"),
    "deconv": ("conv_transpose1d", "conv_transpose2d", "conv_transpose3d"),
    "linear": ("linear", "addmm"),
    "matmul": ("mm", "bmm", "matmul", "baddbmm"),
    "pool": ("max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices", "avg_pool1d", "avg_pool2d",
             "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
             "adaptive_max_pool2d", "_adaptive_avg_pool2d"),
    "norm": ("batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
             "_native_batch_norm_legit_no_training", "native_batch_norm", "layer_norm", "native_layer_norm",
             "group_norm", "native_group_norm", "instance_norm"),
    "activation": ("relu", "relu_", "gelu", "silu", "silu_", "sigmoid", "tanh", "hardtanh", "hardtanh_",
                   "hardswish", "hardswish_", "hardsigmoid", "leaky_relu", "elu", "mish"),
    "elementwise": ("add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_"),
    "reshape": ("view", "_unsafe_view", "reshape", "flatten", "permute", "transpose", "t", "expand", "squeeze",
                "unsqueeze", "contiguous", "alias", "clone", "slice", "select", "detach"),
    "concat": ("cat", "stack"),
    "softmax": ("softmax", "_softmax", "log_softmax", "_log_softmax"),
    "dropout": ("dropout", "native_dropout"),
    "attention": ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
                  "_scaled_dot_product_efficient_attention"),
    "embedding": ("embedding",),
    "recurrent": ("lstm", "gru", "rnn_tanh", "rnn_relu"),
    "upsample": ("upsample_nearest2d", "upsample_bilinear2d"),
}
_ATEN_KIND = {name: kind for kind, names in _ATEN_KINDS.items() for name in names}


def function_kind(node: torch.fx.Node) -> str:
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        return _ATEN_KIND.get(t.overloadpacket.__name__, "other")
    if node.op == "call_method":
        if t in _VIEW_METHODS:
            return "reshape"
        if t in ("add", "mul", "sub", "div", "add_", "mul_"):
            return "elementwise"
        if t in ("relu", "sigmoid", "tanh", "relu_"):
            return "activation"
        if t in ("softmax", "log_softmax"):
            return "softmax"
        if t in ("matmul", "bmm", "mm"):
            return "matmul"
        return "other"
    if t in _VIEW_FUNCS:
        return "reshape"
    if t in _ELEMENTWISE_FUNCS:
        return "elementwise"
    if t in _ACTIVATION_FUNCS:
        return "activation"
    if t in _POOL_FUNCS:
        return "pool"
    if t in _CONCAT_FUNCS:
        return "concat"
    if t in (torch.matmul, torch.bmm, torch.mm, operator.matmul):
        return "matmul"
    if t in (nn.functional.linear, torch.addmm):
        return "linear"
    if t in (nn.functional.softmax, torch.softmax, nn.functional.log_softmax):
        return "softmax"
    if t is getattr(nn.functional, "scaled_dot_product_attention", None):
        return "attention"
    if t in (nn.functional.dropout,):
        return "dropout"
    if t in (nn.functional.embedding,):
        return "embedding"
    if t in (nn.functional.layer_norm, nn.functional.group_norm, nn.functional.batch_norm):
        return "norm"
    return "other"

"""A plan as a training stack takes it: Megatron-LM's launch arguments, NeMo's overrides, the stage split.

Megatron-LM (its ``arguments.py``) sizes a run with ``--tensor-model-parallel-size``,
``--pipeline-model-parallel-size``, ``--micro-batch-size`` and ``--global-batch-size``; the data-parallel size is
what remains of the world (``nnodes x nproc-per-node / (tp x pp)``), interleaving is
``--num-layers-per-virtual-pipeline-stage``, ZeRO-1-style sharding of the optimizer state is
``--use-distributed-optimizer``; NeMo's GPT configuration names the same sizes ``trainer.num_nodes``,
``model.tensor_model_parallel_size``, ... Megatron cuts the layers evenly over the stages; the plan's own cut
(balanced on simulated compute, the embedding on the first stage and the logit layer on the last) is given too,
as the layers each stage holds, and as op ranges for ``torch.distributed.pipelining``'s split points.
"""

from __future__ import annotations

import shlex

from ..base.errors import InputError
from .plans import Plan

FORMATS = ("megatron", "nemo", "stages")


def stage_layers(graph, plan: Plan) -> list[dict]:
    """Per pipeline chunk (a stage, or under interleaving a stage's chunk): its first and last op, how many ops,
    and the transformer layers (``l<i>.`` ops) it holds."""
    out = []
    for k, (lo, hi) in enumerate(zip(plan.cuts, plan.cuts[1:])):
        layers = sorted({int(op.name[1:].split(".", 1)[0]) for op in graph.ops[lo:hi]
                         if op.name.startswith("l") and op.name[1:].split(".", 1)[0].isdigit()})
        out.append({"chunk": k, "stage": k % plan.pp, "first_op": graph.ops[lo].name,
                    "last_op": graph.ops[hi - 1].name, "ops": hi - lo,
                    "layers": [layers[0], layers[-1]] if layers else []})
    return out


def megatron_args(config, plan: Plan, nodes: int, gpus_per_node: int, global_batch: int, precision: str,
                  optimizer: str) -> list[str]:
    """``torchrun`` and ``pretrain_gpt.py``'s arguments for the plan (a ``gpt:`` network's configuration)."""
    if optimizer != "adam":
        raise InputError("Megatron-LM trains with Adam; this plan was made for SGD", field="--optimizer",
                         fix="Plan with --optimizer adam to export it")
    args = ["torchrun", f"--nnodes={nodes}", f"--nproc-per-node={gpus_per_node}", "pretrain_gpt.py",
            "--tensor-model-parallel-size", str(plan.tp), "--pipeline-model-parallel-size", str(plan.pp),
            "--micro-batch-size", str(plan.micro_batch), "--global-batch-size", str(global_batch),
            "--num-layers", str(config.layers), "--hidden-size", str(config.hidden),
            "--num-attention-heads", str(config.heads), "--seq-length", str(config.seq),
            "--max-position-embeddings", str(config.seq)]
    if plan.cuts and not _even(plan, config.layers):
        raise InputError(f"this plan cuts the {config.layers} layers unevenly over {plan.pp * plan.virtual_stages} "
                         "chunks, and Megatron-LM splits them evenly", field="--export",
                         fix="Plan with --pp (times --virtual-stages) dividing the layers, or use --export stages")
    if precision in ("bf16", "fp16"):
        args.append(f"--{precision}")
    if plan.virtual_stages > 1:
        per_chunk, rest = divmod(config.layers, plan.pp * plan.virtual_stages)
        if rest:
            raise InputError(f"{config.layers} layers do not split evenly into {plan.pp * plan.virtual_stages} "
                             "chunks, which Megatron-LM's interleaving needs", field="plan")
        args += ["--num-layers-per-virtual-pipeline-stage", str(per_chunk)]
    if plan.sequence_parallel:
        args.append("--sequence-parallel")
    if plan.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    elif plan.recompute == "full":  # every layer's input kept, its forward run again in the backward
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if plan.zero >= 1:
        args.append("--use-distributed-optimizer")  # shards the optimizer state over the data-parallel group
    if not config.tied:
        args.append("--untie-embeddings-and-output-weights")
    return args


def _even(plan: Plan, layers: int) -> bool:
    chunks = plan.pp * plan.virtual_stages
    return layers % chunks == 0


def nemo_overrides(config, plan: Plan, nodes: int, gpus_per_node: int, global_batch: int,
                   precision: str) -> list[str]:
    """Hydra overrides for NeMo's GPT pre-training configuration."""
    out = [f"trainer.num_nodes={nodes}", f"trainer.devices={gpus_per_node}",
           f"trainer.precision={'bf16-mixed' if precision == 'bf16' else '16-mixed' if precision == 'fp16' else 32}",
           f"model.tensor_model_parallel_size={plan.tp}", f"model.pipeline_model_parallel_size={plan.pp}",
           f"model.micro_batch_size={plan.micro_batch}", f"model.global_batch_size={global_batch}",
           f"model.num_layers={config.layers}", f"model.hidden_size={config.hidden}",
           f"model.num_attention_heads={config.heads}", f"model.encoder_seq_length={config.seq}",
           f"model.max_position_embeddings={config.seq}"]
    if plan.virtual_stages > 1:
        out.append(f"model.virtual_pipeline_model_parallel_size={plan.virtual_stages}")
    if plan.sequence_parallel:
        out.append("model.sequence_parallel=True")
    if plan.recompute == "selective":
        out.append("model.activations_checkpoint_granularity=selective")
    elif plan.recompute == "full":
        out += ["model.activations_checkpoint_granularity=full", "model.activations_checkpoint_method=uniform",
                "model.activations_checkpoint_num_layers=1"]
    if plan.zero >= 1:
        out.append("model.optim.name=distributed_fused_adam")
    return out


def export(fmt: str, graph, config, plan: Plan, nodes: int, gpus_per_node: int, global_batch: int,
           optimizer: str) -> str:
    if fmt not in FORMATS:
        raise InputError(f"unknown export {fmt!r}", field="--export", fix="Use " + ", ".join(FORMATS))
    if fmt == "stages":
        import json
        return json.dumps({"pp": plan.pp, "dp": plan.dp, "virtual_stages": plan.virtual_stages,
                           "micro_batch": plan.micro_batch, "micro_batches": plan.micro_batches,
                           "chunks": stage_layers(graph, plan)}, indent=1)
    if config is None:
        raise InputError(f"{fmt} launch arguments need a gpt: network (its layers, hidden size and heads)",
                         field="--export", fix="Plan a gpt:layers=L,hidden=H,heads=A network, or use --export stages")
    if plan.zero >= 3:
        raise InputError("Megatron-LM and NeMo have no ZeRO stage 3 (their distributed optimizer shards the "
                         "optimizer state and gradients, not the weights)", field="--export",
                         fix="Export a plan made with --zero 0 to 2, or use --export stages")
    if fmt == "megatron":
        return shlex.join(megatron_args(config, plan, nodes, gpus_per_node, global_batch, graph.precision, optimizer))
    return shlex.join(["python", "megatron_gpt_pretraining.py",
                       *nemo_overrides(config, plan, nodes, gpus_per_node, global_batch, graph.precision)])

"""PyTorch fully sharded data parallel (FSDP2, torch.distributed.fsdp.fully_shard): NCCL on GPU, Gloo on CPU.

Each rank keeps 1/processes of every parameter, gradient and Adam moment. A
block's parameters are all-gathered for its forward and again for its backward
and freed after each; its gradients are reduce-scattered (averaged over the
ranks), so each rank updates only its slice. Ranks, rendezvous and the
collectives on arrays are DDP's (native.py, one process per GPU under
torchrun or srun); what differs is the model and its state.

The sharding units are the UNet's double convolutions; the transposed
convolutions and the head belong to the root unit. FSDP2 shards only
contiguous tensors, so the parameters are NCHW here while activations stay
channels-last (runtime.LAYOUT). Checkpoints hold whole tensors (gather_state),
so they restore into the plain model before it is sharded again.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor

from scalebench.settings import RunSettings
from scalebench.train.collectives import Bench
from scalebench.train.rank_env import RankInfo
from scalebench.train.torch import collectives, native, step_timing
from scalebench.train.torch.model import DoubleConv
from scalebench.train.torch.native import DDPBackend

RESHARD_AFTER_FORWARD = True  # free each unit's gathered parameters after its forward (ZeRO-3)


class FSDPBackend(DDPBackend):
    """DDP's ranks with the model's state sharded: that it shards (shards_state) and needs two ranks
    (min_ranks) are its registry entry's facts, which the planner and preflight.py read."""

    name = "fsdp"
    checkpoint_on_all_ranks = True  # gathering the shards is a collective

    def distribute(self, model: nn.Module, optimizer: torch.optim.Optimizer, marks=None) -> tuple:
        restored = optimizer.state_dict() if optimizer.state else None  # a resumed optimizer's whole tensors
        for parameter in model.parameters():
            parameter.data = parameter.data.contiguous()
        # rank 0's parameters and buffers everywhere, as DDP broadcasts them when it wraps the model
        # (sharding keeps each rank's own slice of its own tensors)
        self.broadcast_from_root([tensor.data for tensor in [*model.parameters(), *model.buffers()]])
        mesh = init_device_mesh(self.device_type, (self.processes,))
        policy = reduce_policy(self.gradient_compression)
        for unit in model.modules():
            if isinstance(unit, DoubleConv):
                fully_shard(unit, mesh=mesh, reshard_after_forward=RESHARD_AFTER_FORWARD, mp_policy=policy)
        fully_shard(model, mesh=mesh, reshard_after_forward=RESHARD_AFTER_FORWARD, mp_policy=policy)
        if marks is not None and marks.comm is not None:
            step_timing.timed_fsdp_collectives(model, marks)
        held = sum(parameter.to_local().numel() for parameter in model.parameters())
        total = sum(parameter.numel() for parameter in model.parameters())
        print(f"rank {self.rank}/{self.processes}: FSDP holds {held} of the model's {total} parameters", flush=True)
        # the optimizer must hold the sharded parameters that replaced the model's own
        sharded = type(optimizer)(model.parameters(), **optimizer.defaults)
        if restored is not None:
            sharded.load_state_dict(shard_optimizer_state(restored, list(model.parameters())))
        return model, sharded

    def gather_state(self, state: dict) -> dict:
        return whole_tensors(state)

    def collective_bench(self, model: nn.Module) -> Bench:
        device = self.device if self.device is not None else torch.device("cpu")
        source = "the largest FSDP unit's parameters (all-gathered and reduce-scattered as one)"
        unit = largest_unit_bytes(model)  # a sharded parameter counts its whole tensor's elements
        return collectives.process_group(device, ("all_reduce", "reduce_scatter", "all_gather"), unit, source)

    def versions(self) -> dict:
        return {"distributed": f"torch.distributed {dist.get_backend()}, FSDP2 (fully_shard)"}

    def options(self) -> dict:
        return {
            "fsdp": {
                "api": "torch.distributed.fsdp.fully_shard",
                "sharded": "parameters, gradients, optimizer state",
                "units": "each DoubleConv block; the rest in the root",
                "reshard_after_forward": RESHARD_AFTER_FORWARD,
                "parameter_layout": "contiguous",
            }
        }


def largest_unit_bytes(model: nn.Module) -> int:
    """Bytes of the largest sharding unit's parameters: a DoubleConv block, or the root's rest."""
    units = [
        sum(p.numel() * p.element_size() for p in unit.parameters())
        for unit in model.modules()
        if isinstance(unit, DoubleConv)
    ]
    whole = sum(p.numel() * p.element_size() for p in model.parameters())
    return max([*units, whole - sum(units)])


def reduce_policy(compression: str) -> MixedPrecisionPolicy:
    """FSDP2's mixed precision for training.compression: fp16 reduce-scatters each unit's gradients
    as float16 (cast from the parameters' float32, cast back after); parameters and compute keep
    their own types either way (amp is autocast's, outside FSDP)."""
    return MixedPrecisionPolicy(reduce_dtype=torch.float16 if compression == "fp16" else None)


def whole_tensors(value):
    """`value` (a state dict, nested) with every DTensor gathered whole; in the same order on every rank."""
    if isinstance(value, DTensor):
        return value.full_tensor()
    if isinstance(value, dict):
        return {key: whole_tensors(item) for key, item in value.items()}
    if isinstance(value, list):
        return [whole_tensors(item) for item in value]
    return value


def shard_optimizer_state(state: dict, parameters: list) -> dict:
    """An optimizer state dict of whole tensors, each per-parameter tensor sharded like its parameter
    (state is keyed by the parameters' order, the same before and after sharding)."""
    sharded = {}
    for index, values in state["state"].items():
        parameter = parameters[index]
        sharded[index] = {
            key: distribute_tensor(value.contiguous(), parameter.device_mesh, parameter.placements)
            if torch.is_tensor(value) and value.shape == parameter.shape
            else value
            for key, value in values.items()
        }
    return {**state, "state": sharded}


def create(run: RunSettings, place: RankInfo, device_type: str, share_gpu: bool) -> FSDPBackend:
    """The backend of a joined process group (DDP's)."""
    joined = native.join(run, place, device_type, share_gpu)
    return FSDPBackend(place, device_type, share_gpu, run.training.compression, *joined)

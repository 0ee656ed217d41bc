"""PyTorch's collectives for the benchmark (train/collectives.py), through each backend's own library:
torch.distributed (DDP, FSDP: NCCL on GPUs, Gloo on CPUs), Horovod, and DataParallel's copies
between the GPUs of its one process (torch.cuda.comm: the gradients added up on the first GPU,
the model broadcast from it). Buffers are float32 zeros (sums of zeros stay finite however often
they are reduced); each run waits for its result on the device before it returns."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from scalebench.train.collectives import TENSOR_NAME, Bench, all_reduce_bench


def _waiter(devices: list[torch.device]) -> Callable[[], None]:
    cuda = [device for device in devices if device.type == "cuda"]

    def wait() -> None:
        for device in cuda:
            torch.cuda.synchronize(device)

    return wait


def _releaser(devices: list[torch.device]) -> Callable[[], None]:
    def release() -> None:  # the caching allocator keeps freed buffers: hand them back before training
        if any(device.type == "cuda" for device in devices):
            torch.cuda.empty_cache()

    return release


def process_group(device: torch.device, ops: tuple[str, ...], fusion_bytes: int | None, fusion_source: str) -> Bench:
    """torch.distributed's collectives on `device` (a GPU with NCCL, the CPU with Gloo)."""
    world, wait = dist.get_world_size(), _waiter([device])

    def all_reduce(elements: int) -> Callable[[], None]:
        tensor = torch.zeros(elements, dtype=torch.float32, device=device)
        return lambda: (dist.all_reduce(tensor), wait())

    def reduce_scatter(elements: int) -> Callable[[], None]:
        whole = torch.zeros(elements, dtype=torch.float32, device=device)
        part = torch.empty(elements // world, dtype=torch.float32, device=device)
        return lambda: (dist.reduce_scatter_tensor(part, whole), wait())

    def all_gather(elements: int) -> Callable[[], None]:
        part = torch.zeros(elements // world, dtype=torch.float32, device=device)
        whole = torch.empty(elements, dtype=torch.float32, device=device)
        return lambda: (dist.all_gather_into_tensor(whole, part), wait())

    available = {"all_reduce": all_reduce, "reduce_scatter": reduce_scatter, "all_gather": all_gather}
    return Bench(
        library=f"torch.distributed {dist.get_backend()}",
        ops={op: available[op] for op in ops},
        barrier=all_reduce(1 * world),
        fusion_bytes=fusion_bytes,
        fusion_source=fusion_source,
        release=_releaser([device]),
    )


def horovod(hvd, device: torch.device, library: str, fusion_bytes: int, fusion_source: str) -> Bench:
    """Horovod's allreduce of torch tensors on `device` (its NCCL on GPUs where built with it, else Gloo)."""
    wait = _waiter([device])

    def all_reduce(elements: int) -> Callable[[], None]:
        tensor = torch.zeros(elements, dtype=torch.float32, device=device)
        return lambda: (hvd.allreduce_(tensor, op=hvd.Sum, name=f"{TENSOR_NAME}.{elements}"), wait())

    return all_reduce_bench(all_reduce, hvd.size(), library, fusion_bytes, fusion_source, _releaser([device]))


def data_parallel(device_ids: list[int]) -> Bench:
    """nn.DataParallel's exchanges between its GPUs: the replicas' gradients added up on the first
    (torch.cuda.comm.reduce_add, in its backward) and the model copied from it to the others
    (torch.cuda.comm.broadcast, in each forward)."""
    from torch.cuda import comm

    devices = [torch.device("cuda", index) for index in device_ids]
    wait = _waiter(devices)

    def reduce(elements: int) -> Callable[[], None]:
        parts = [torch.zeros(elements, dtype=torch.float32, device=device) for device in devices]
        return lambda: (comm.reduce_add(parts, destination=device_ids[0]), wait())

    def broadcast(elements: int) -> Callable[[], None]:
        source = torch.zeros(elements, dtype=torch.float32, device=devices[0])
        return lambda: (comm.broadcast(source, devices=device_ids), wait())

    return Bench(
        library=f"torch.cuda.comm (DataParallel over {len(devices)} GPUs)",
        ops={"reduce": reduce, "broadcast": broadcast},
        barrier=wait,  # one process: every device idle is every replica ready
        release=_releaser(devices),
    )

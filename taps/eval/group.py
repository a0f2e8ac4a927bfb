"""The bench's processes: this process's rank in a torch.distributed group (`torchrun
--nproc_per_node=N -m taps.bench ...`; gloo on the CPU, nccl on GPUs, one GPU per process), or a
group of one without torchrun. Rank 0 reads the folder and writes the outputs; `broadcast` and
`gather` carry what the others need."""

from __future__ import annotations

import os
from datetime import timedelta

import torch


class Group:
    """This process's rank in a torch.distributed group (a group of one without torchrun)."""

    def __init__(self, args):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.dist = None
        if self.world > 1:
            import torch.distributed as dist

            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            on_gpu = args.device.startswith("cuda") or (args.device == "auto" and torch.cuda.is_available())
            if on_gpu:
                if not torch.cuda.is_available():
                    raise RuntimeError("device 'cuda' was asked for but no CUDA GPU is available; use --device cpu")
                args.device = f"cuda:{local_rank % torch.cuda.device_count()}"
                torch.cuda.set_device(torch.device(args.device))
            dist.init_process_group("nccl" if on_gpu else "gloo", timeout=timedelta(hours=12))
            self.dist = dist

    def broadcast(self, value):
        """Rank 0's value, on every rank."""
        if self.dist is None:
            return value
        box = [value if self.rank == 0 else None]
        self.dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, value) -> list | None:
        """Every rank's value, as a list on rank 0 (None elsewhere)."""
        if self.dist is None:
            return [value]
        boxes = [None] * self.world if self.rank == 0 else None
        self.dist.gather_object(value, boxes, dst=0)
        return boxes

    def close(self) -> None:
        if self.dist is not None and self.dist.is_initialized():
            self.dist.destroy_process_group()

"""Collectives of a one-rank NCCL process group, for scripts/gpu-validate's `nccl` part: whether cuflight's agent
records NCCL's own NVTX ranges (NCCL names one after each API call it makes, `ncclAllReduce`, in domain "NCCL":
its src/collectives.cc and NVTX3_FUNC_WITH_PARAMS), and which kernels a one-rank group launches, so that the
report tells each collective by the range around its launch on a real GPU as it does on cudasim.

`python nccl_single.py STEPS`: STEPS steps, each an NVTX range "step N" holding an all-reduce, an all-gather, an
all-to-all and a broadcast of 4 MiB, then a synchronize. One GPU is enough: NCCL refuses two ranks on one device,
and a one-rank group still goes through NCCL's API (its kernels may be copies: printed, not assumed).
"""
import os
import sys

import torch
import torch.distributed as dist


def main():
    steps = int(sys.argv[1])
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    n = 1 << 20  # 4 MiB of fp32
    x = torch.ones(n, device="cuda")
    gathered = torch.empty(n, device="cuda")
    swapped = torch.empty(n, device="cuda")
    for i in range(steps):
        torch.cuda.nvtx.range_push(f"step {i}")
        dist.all_reduce(x)
        dist.all_gather_into_tensor(gathered, x)
        dist.all_to_all_single(swapped, x)
        dist.broadcast(x, src=0)
        x.mul_(0.5)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    print(f"nccl {torch.cuda.nccl.version()} steps {steps}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

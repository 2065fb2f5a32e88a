"""Adds a CUDA_GPU_MEMORY_USAGE_EVENTS table, as `nsys --cuda-memory-usage=true` exports it (columns and enums
as the Nsight Systems SQLite schema and the export's own ENUM_CUDA_MEM_KIND / ENUM_CUDA_DEV_MEM_EVENT_OPER list
them), to a copy of an nsys export, and prints what its memory tables must say, counted here independently:
device memory is Device, Array, Device Static and Managed; Pinned is pinned host memory; Pageable and Unknown are
not GPU memory. Usage: nsys_memory.py SRC DST"""
import json
import shutil
import sqlite3
import sys

src, dst = sys.argv[1], sys.argv[2]
shutil.copyfile(src, dst)
c = sqlite3.connect(dst)
pid = c.execute("SELECT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1").fetchone()[0]
t0 = c.execute("SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
c.execute("CREATE TABLE CUDA_GPU_MEMORY_USAGE_EVENTS (start INTEGER NOT NULL, globalPid INTEGER, deviceId INTEGER, "
          "contextId INTEGER, address INTEGER NOT NULL, pc INTEGER, bytes INTEGER NOT NULL, memKind INTEGER NOT NULL, "
          "memoryOperationType INTEGER NOT NULL, name TEXT, correlationId INTEGER, streamId INTEGER)")
# (offset ns, address, bytes, memKind, operation)
rows = [
    (1000, 0x7f0000000000, 1 << 20, 2, 0),   # device 1 MiB
    (2000, 0x7f0000100000, 4 << 20, 2, 0),   # device 4 MiB: peak 5 MiB
    (3000, 0x7f0000000000, 1 << 20, 2, 1),   # free the 1 MiB
    (4000, 0x7f0000600000, 2 << 20, 4, 0),   # managed 2 MiB: 6 MiB live, the peak
    (5000, 0x7e0000000000, 8 << 20, 1, 0),   # pinned host 8 MiB
    (6000, 0x7d0000000000, 16 << 20, 0, 0),  # pageable: not GPU memory
    (7000, 0x7f0000600000, 2 << 20, 4, 1),   # free the managed block
    (8000, 0x7e0000000000, 8 << 20, 1, 1),   # free the pinned block
]
for off, addr, size, kind, op in rows:
    c.execute("INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS VALUES (?,?,0,1,?,0,?,?,?,NULL,0,0)",
              (t0 + off, pid, addr, size, kind, op))
c.commit()


def account(kinds):
    live = peak = allocated = mallocs = frees = 0
    for _, _, size, kind, op in rows:
        if kind not in kinds:
            continue
        if op == 0:
            live += size
            allocated += size
            mallocs += 1
            peak = max(peak, live)
        else:
            live -= size
            frees += 1
    return {"alloc_bytes": allocated, "free_count": frees, "live_bytes_at_end": live, "malloc_count": mallocs,
            "peak_bytes": peak}


device = account({2, 3, 4, 5, 6})
device["pinned_host"] = account({1})
print(json.dumps(device))

"""Counts what a shared trace file itself holds, independently of cuflight: Kineto JSON (plain/gzip) by category,
or an nsys SQLite export by table. Prints JSON. Usage: raw_counts.py TRACE"""
import gzip
import json
import sqlite3
import sys
from decimal import Decimal


def kineto(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        # Decimal keeps nanosecond digits exactly, as cuflight does.
        events = json.load(f, parse_float=Decimal)["traceEvents"]
    c = {"kernels": 0, "kernel_ns": 0, "api": 0, "memcpy": 0, "memcpy_bytes": 0, "memset": 0, "memset_bytes": 0}
    # Copy kernels that start inside a ProfilerStep range, by what ATen's kernel names say they do.
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    c["concat_ns_in_steps"] = c["casts_ns_in_steps"] = 0
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "kernel" and any(a <= e["ts"] <= b for a, b in steps):
            name = e["name"].lower()
            kind = "concat" if "catarraybatchedcopy" in name else "casts" if "copy_kernel" in name else None
            if kind:
                c[f"{kind}_ns_in_steps"] += int(Decimal(e["dur"]) * 1000)
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat")
        if cat in ("kernel", "Kernel"):
            c["kernels"] += 1
            c["kernel_ns"] += int(Decimal(e["dur"]) * 1000)
        elif cat in ("cuda_runtime", "Runtime", "cuda_driver", "Driver"):
            c["api"] += 1
        elif cat in ("gpu_memcpy", "Memcpy"):
            c["memcpy"] += 1
            c["memcpy_bytes"] += int(e["args"]["bytes"])
        elif cat in ("gpu_memset", "Memset"):
            c["memset"] += 1
            c["memset_bytes"] += int(e["args"]["bytes"])
    return c


def nsys(path):
    db = sqlite3.connect(path)
    one = lambda q: db.execute(q).fetchone()[0] or 0
    return {
        "kernels": one("select count(*) from CUPTI_ACTIVITY_KIND_KERNEL"),
        "kernel_ns": one("select sum(end - start) from CUPTI_ACTIVITY_KIND_KERNEL"),
        "api": one("select count(*) from CUPTI_ACTIVITY_KIND_RUNTIME"),
        "memcpy": one("select count(*) from CUPTI_ACTIVITY_KIND_MEMCPY"),
        "memcpy_bytes": one("select sum(bytes) from CUPTI_ACTIVITY_KIND_MEMCPY"),
        "memset": 0,
        "memset_bytes": 0,
        "sync": one("select count(*) from CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"),
    }


path = sys.argv[1]
print(json.dumps(nsys(path) if path.endswith(".sqlite") else kineto(path)))

"""cuda_api_sum, cuda_gpu_mem_size_sum and cuda_kern_exec_sum of an Nsight Systems SQLite export, computed
independently with Python's sqlite3 and statistics modules (nsys's own definitions: sample standard deviation; the median of an even count is
the mean of the two middle values, floored here as cuflight prints integers). Prints JSON."""
import json
import sqlite3
import statistics
import sys
from collections import defaultdict

db = sqlite3.connect(sys.argv[1])


def summary(values):
    v = sorted(values)
    n = len(v)
    med = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) // 2
    return {"count": n, "total": sum(v), "avg": sum(v) // n, "median": med, "min": v[0], "max": v[-1],
            "stddev": round(statistics.stdev(v)) if n > 1 else 0}


api = defaultdict(list)
for name, d in db.execute("select s.value, r.end - r.start from CUPTI_ACTIVITY_KIND_RUNTIME r "
                          "join StringIds s on r.nameId = s.id"):
    api[name.split("_v")[0]].append(d)
sizes = defaultdict(list)
for kind, b in db.execute("select copyKind, bytes from CUPTI_ACTIVITY_KIND_MEMCPY"):
    sizes[kind].append(b)
# Each kernel with the runtime call of its correlation id (of the same process), as nsys's cuda_kern_exec_sum
# groups them (process, thread, device, call, kernel): the call's time, the queue from its return to the kernel's
# start (kernels that started at or after it only), the kernel's time, and the whole, to the later of the two ends.
launches = defaultdict(lambda: {"api": [], "queue": [], "kernel": [], "total": []})
for api_name, kernel, rs, re_, ks, ke, gtid, dev in db.execute(
        "select a.value, b.value, r.start, r.end, k.start, k.end, r.globalTid, k.deviceId "
        "from CUPTI_ACTIVITY_KIND_KERNEL k "
        "join CUPTI_ACTIVITY_KIND_RUNTIME r on r.correlationId = k.correlationId "
        "and k.globalPid = (r.globalTid & 0xFFFFFFFFFF000000) "
        "join StringIds a on r.nameId = a.id join StringIds b on k.demangledName = b.id"):
    pid, tid = (gtid >> 24) & 0xFFFFFF, gtid & 0xFFFFFF
    row = launches[f"{pid}|{tid}|{dev}|{api_name.split('_v')[0]}|{kernel}"]
    row["api"].append(re_ - rs)
    if ks >= re_:
        row["queue"].append(ks - re_)
    row["kernel"].append(ke - ks)
    row["total"].append(max(re_, ke) - rs)
kern_exec = {k: {part: summary(v) if v else None for part, v in parts.items()} for k, parts in launches.items()}
# Kernel time by name and launch configuration (cuda_gpu_kern_gb_sum).
shapes = defaultdict(list)
for name, gx, gy, gz, bx, by, bz, d in db.execute(
        "select s.value, gridX, gridY, gridZ, blockX, blockY, blockZ, k.end - k.start "
        "from CUPTI_ACTIVITY_KIND_KERNEL k join StringIds s on k.demangledName = s.id"):
    shapes[f"{name}|{gx} {gy} {gz}|{bx} {by} {bz}"].append(d)
# Kernel time by nsys's shortName (what `cuda_gpu_kern_sum:base` groups by) and by mangledName (`:mangled`).
by_short, by_mangled = defaultdict(list), defaultdict(list)
for short, mangled, d in db.execute(
        "select a.value, b.value, k.end - k.start from CUPTI_ACTIVITY_KIND_KERNEL k "
        "join StringIds a on k.shortName = a.id join StringIds b on k.mangledName = b.id"):
    by_short[short].append(d)
    by_mangled[mangled].append(d)
# Kernels and copies together (cuda_gpu_sum): by name, each with its category; shares of the whole.
gpu_ops = defaultdict(list)
for name, d in db.execute("select s.value, k.end - k.start from CUPTI_ACTIVITY_KIND_KERNEL k "
                          "join StringIds s on k.demangledName = s.id"):
    gpu_ops[("CUDA_KERNEL", name)].append(d)
for label, d in db.execute("select o.label, m.end - m.start from CUPTI_ACTIVITY_KIND_MEMCPY m "
                           "join ENUM_CUDA_MEMCPY_OPER o on m.copyKind = o.id"):
    gpu_ops[("MEMORY_OPER", f"[CUDA memcpy {label}]")].append(d)
all_ns = sum(sum(v) for v in gpu_ops.values())
gpu_sum = {f"{c}|{n}": dict(summary(v), percent=round(100 * sum(v) / all_ns, 1)) for (c, n), v in gpu_ops.items()}
print(json.dumps({"gpu_sum": gpu_sum,
                  "kern_base": {k: summary(v) for k, v in by_short.items()},
                  "kern_mangled": {k: summary(v) for k, v in by_mangled.items()},
                  "api": {k: summary(v) for k, v in api.items()},
                  "sizes": {str(k): summary(v) for k, v in sizes.items()},
                  "kern_exec": kern_exec,
                  "kern_gb": {k: summary(v) for k, v in shapes.items()}}))

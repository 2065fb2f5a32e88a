"""cuda_gpu_trace, cuda_api_trace and cuda_kern_exec_trace of an Nsight Systems SQLite export, row by row, computed
with Python's sqlite3 from the export's tables as nsys's report documentation defines the columns (start, duration,
correlation id, launch configuration, bytes, memory kinds as ENUM_CUDA_MEM_KIND labels, device as "name (id)",
stream; a call's name without its _vNNNN suffix and its return value; each kernel with the runtime call of its
correlation id in the same process, its queue from the call's return when the kernel started at or after it, and
its total to the later end). Times are the export's own (ns from the session's start). Prints JSON."""
import json
import sqlite3
import sys

db = sqlite3.connect(sys.argv[1])
s = {i: v for i, v in db.execute("select id, value from StringIds")}
mem_kind = {i: label for i, label in db.execute("select id, label from ENUM_CUDA_MEM_KIND")}
copy_kind = {i: label for i, label in db.execute("select id, label from ENUM_CUDA_MEMCPY_OPER")}
gpu_name = {i: name for i, name in db.execute("select id, name from TARGET_INFO_GPU")}


def call_name(n):
    return n[:-6] if len(n) > 6 and n[-6:-4] == "_v" else n


gpu = []
for row in db.execute("select start, end, correlationId, gridX, gridY, gridZ, blockX, blockY, blockZ, "
                      "registersPerThread, staticSharedMemory, dynamicSharedMemory, globalPid, deviceId, streamId, "
                      "demangledName from CUPTI_ACTIVITY_KIND_KERNEL"):
    start, end, corr, *config, g, dev, stream, name = row
    gpu.append([start, end - start, corr, *config, None, None, None, None, (g >> 24) & 0xFFFFFF,
                f"{gpu_name[dev]} ({dev})", stream, s[name]])
for start, end, corr, b, kind, src, dst, g, dev, stream in db.execute(
        "select start, end, correlationId, bytes, copyKind, srcKind, dstKind, globalPid, deviceId, streamId "
        "from CUPTI_ACTIVITY_KIND_MEMCPY"):
    rate = b * 1_000_000_000 // (end - start) if end > start else None
    gpu.append([start, end - start, corr] + [None] * 9 + [b, rate, mem_kind[src], mem_kind[dst],
                                                         (g >> 24) & 0xFFFFFF, f"{gpu_name[dev]} ({dev})", stream,
                                                         f"[CUDA memcpy {copy_kind[kind]}]"])
api = [[start, end - start, call_name(s[name]), result, corr, (g >> 24) & 0xFFFFFF, g & 0xFFFFFF]
       for start, end, name, result, corr, g in db.execute(
           "select start, end, nameId, returnValue, correlationId, globalTid from CUPTI_ACTIVITY_KIND_RUNTIME")]
kern_exec = []
for rs, re_, name, g, ks, ke, dev, gx, gy, gz, bx, by, bz, kname in db.execute(
        "select r.start, r.end, r.nameId, r.globalTid, k.start, k.end, k.deviceId, k.gridX, k.gridY, k.gridZ, "
        "k.blockX, k.blockY, k.blockZ, k.demangledName from CUPTI_ACTIVITY_KIND_KERNEL k "
        "join CUPTI_ACTIVITY_KIND_RUNTIME r on r.correlationId = k.correlationId "
        "and k.globalPid = (r.globalTid & 0xFFFFFFFFFF000000)"):
    queued = ks >= re_
    kern_exec.append([rs, re_ - rs, re_ if queued else None, ks - re_ if queued else None, ks, ke - ks,
                      max(re_, ke) - rs, (g >> 24) & 0xFFFFFF, g & 0xFFFFFF, dev, call_name(s[name]),
                      "%4d %4d %4d" % (gx, gy, gz), "%4d %4d %4d" % (bx, by, bz), s[kname]])
print(json.dumps({"gpu_trace": gpu, "api_trace": api, "kern_exec_trace": kern_exec}))

"""cuda_api_sum and cuda_gpu_mem_size_sum of an Nsight Systems SQLite export, computed independently with Python's
sqlite3 and statistics modules (nsys's own definitions: sample standard deviation; the median of an even count is
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
print(json.dumps({"api": {k: summary(v) for k, v in api.items()},
                  "sizes": {str(k): summary(v) for k, v in sizes.items()}}))

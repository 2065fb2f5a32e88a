"""Sets return codes in a copy of an nsys export, as an export of a run that failed holds them (its
CUPTI_ACTIVITY_KIND_RUNTIME.returnValue column, cudaError_t values), and prints the rows `stats --report
cuda_api_errors` must show, counted here: the first two cudaMalloc calls out of memory (2), the last two
cudaDeviceSynchronize calls an illegal address (700, sticky). Usage: nsys_errors.py SRC DST"""
import json
import shutil
import sqlite3
import sys

src, dst = sys.argv[1], sys.argv[2]
shutil.copyfile(src, dst)
c = sqlite3.connect(dst)


def calls(name, order, n):
    q = ("SELECT r.rowid, r.start FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
         f"WHERE s.value LIKE ? ORDER BY r.start {order} LIMIT {n}")
    return c.execute(q, (name + "%",)).fetchall()


want = []
for name, order, code, error, klass in (("cudaMalloc", "ASC", 2, "cudaErrorMemoryAllocation", "out_of_memory"),
                                        ("cudaDeviceSynchronize", "DESC", 700, "cudaErrorIllegalAddress", "sticky")):
    rows = calls(name, order, 2)
    c.executemany("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET returnValue = ? WHERE rowid = ?", [(code, r) for r, _ in rows])
    want.append({"api": name, "code": code, "error": error, "class": klass, "count": len(rows)})
c.commit()
print(json.dumps(sorted(want, key=lambda w: w["class"] != "sticky")))

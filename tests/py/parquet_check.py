"""Queries a cuflight Parquet export with DuckDB (as a user would, hive partitioning on) and prints JSON of what
`cuflight stats` also says: per kernel name and per API name count and total ns, copies, memsets, NVTX ranges,
allocations, steps, per rank the kernel count and the communication kernels by collective; with README, also
the rows of the README's DuckDB query run on DIR (its `job/` replaced by DIR), so the documented query is known
to run. Usage: parquet_check.py DIR [README]"""
import json
import sys

import duckdb

root = sys.argv[1]


def t(name):
    return f"read_parquet('{root}/{name}/**/*.parquet', hive_partitioning = true)"


def rows(sql):
    return duckdb.sql(sql).fetchall()


out = {
    "kernels": {n: [c, int(s)] for n, c, s in rows(f"select name, count(*), sum(duration_ns) from {t('kernels')} group by name")},
    "api": {n: [c, int(s)] for n, c, s in rows(f"select name, count(*), sum(duration_ns) from {t('api')} group by name")},
    "copies": [int(x or 0) for x in rows(f"select count(*), sum(bytes) from {t('copies')}")[0]],
    "memsets": [int(x or 0) for x in rows(f"select count(*), sum(bytes) from {t('memsets')}")[0]],
    "nvtx_ranges": rows(f"select count(*) from {t('nvtx')} where kind <> 'mark'")[0][0],
    "allocs": rows(f"select count(*) from {t('memory')} where op = 'alloc'")[0][0],
    "frees": rows(f"select count(*) from {t('memory')} where op = 'free'")[0][0],
    "steps": rows(f"select count(*) from {t('steps')}")[0][0],
    "kernels_by_rank": {str(r): c for r, c in rows(f"select rank, count(*) from {t('kernels')} group by rank")},
    # Communication kernels by rank and the collective each ran.
    "collectives": {f"{r} {c}": n for r, c, n in rows(
        f"select rank, collective, count(*) from {t('kernels')} where collective is not null group by all")},
    "first_kernel_ns": rows(f"select min(start_ns) from {t('kernels')}")[0][0],
    "kernels_launched_before_their_call": rows(
        f"select count(*) from {t('kernels')} k join {t('api')} a on k.host = a.host and k.pid = a.pid "
        f"and k.correlation = a.correlation where k.correlation <> 0 and k.start_ns < a.start_ns")[0][0],
    "bad_spans": rows(f"select count(*) from {t('kernels')} where end_ns < start_ns or duration_ns <> end_ns - start_ns")[0][0],
    # Device counters: samples, and the mean DRAM read share of the samples inside stream_copy kernels.
    "gpu_samples": rows(f"select count(*) from {t('gpu_samples')}")[0][0],
    "copy_dram_read": rows(
        f"select avg(g.dram_read) from {t('gpu_samples')} g join {t('kernels')} k on g.host = k.host and "
        f"g.pid = k.pid and g.device = k.device and g.start_ns >= k.start_ns and g.end_ns <= k.end_ns "
        f"where k.name = 'stream_copy'")[0][0],
}
if len(sys.argv) > 2:
    text = open(sys.argv[2], encoding="utf-8").read()
    after = text[text.index("DuckDB on a laptop"):]
    sql = after[after.index("```sql") + len("```sql"):]
    sql = sql[: sql.index("```")].replace("'job/", f"'{root}/")
    out["readme_query"] = [[r, n, c, float(ms)] for r, n, c, ms in rows(sql)]
print(json.dumps(out))

"""Runs Holistic Trace Analysis' temporal breakdown on one Kineto JSON trace (plain or .gz) and prints it as JSON:
{"idle_us", "compute_us", "non_compute_us", "kernel_us"} for the trace's rank, and its idle time breakdown
summed over streams: {"host_wait_us", "kernel_wait_us", "other_us"}, and its communication/computation overlap
{"comm_overlap_pct"} (null without communication kernels). Usage: hta_breakdown.py [--exact] TRACE

--exact keeps nanoseconds (HTA_DISABLE_NS_ROUNDING=1), as cuflight breaks down its own captures and their export;
without it HTA rounds starts up and ends down to whole microseconds, and sub-microsecond ops turn negative.
"""
import json
import logging
import math
import os
import shutil
import sys
import tempfile

logging.disable(logging.WARNING)
if "--exact" in sys.argv:
    sys.argv.remove("--exact")
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
from hta.trace_analysis import TraceAnalysis  # noqa: E402


def main(path):
    with tempfile.TemporaryDirectory() as d:
        name = "rank-0.json.gz" if path.endswith(".gz") else "rank-0.json"
        shutil.copy(path, os.path.join(d, name))
        analyzer = TraceAnalysis(trace_dir=d)
        df = analyzer.get_temporal_breakdown(visualize=False)
        row = df.iloc[0]
        out = {
            "idle_us": float(row["idle_time(us)"]),
            "compute_us": float(row["compute_time(us)"]),
            "non_compute_us": float(row["non_compute_time(us)"]),
            "kernel_us": float(row["kernel_time(us)"]),
        }
        idle = analyzer.get_idle_time_breakdown(visualize=False)[0]
        for category in ("host_wait", "kernel_wait", "other"):
            rows = idle[idle["idle_category"] == category]
            out[category + "_us"] = float(rows["idle_time"].sum())
        overlap = float(analyzer.get_comm_comp_overlap(visualize=False).iloc[0]["comp_comm_overlap_pctg"])
        out["comm_overlap_pct"] = None if math.isnan(overlap) else overlap
        print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])

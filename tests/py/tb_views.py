"""What TensorBoard's PyTorch profiler plugin (torch-tb-profiler) shows for a Kineto JSON trace, computed with the
plugin's own parser: the overview (step breakdown, GPU summary, recommendations), the kernel view (per kernel
name: calls, total, mean blocks per SM, mean est. achieved occupancy; per operator and kernel), and the operator
view grouped by name and input shape. Prints JSON."""
import gzip
import json
import logging
import sys

from torch_tb_profiler.profiler.data import RunProfileData
from torch_tb_profiler.profiler.event_parser import ProfileRole

logging.disable(logging.WARNING)
path = sys.argv[1]
raw = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
profile = RunProfileData.from_json("worker", "span", json.loads(raw))
costs = profile.avg_costs.costs
total = costs[ProfileRole.Total]
out = {"breakdown": {r.name: 100.0 * costs[r] / total for r in ProfileRole if r != ProfileRole.Total}}

g = profile.gpu_metrics_parser
out["gpu"] = {
    str(d): {
        "utilization": g.gpu_utilization[d],
        "sm_efficiency": g.avg_approximated_sm_efficiency_per_device[d],
        "occupancy": g.avg_occupancy_per_device[d],
    }
    for d in sorted(g.gpu_ids)
}
out["has_blocks_per_sm"] = g.has_blocks_per_sm
out["has_occupancy"] = g.has_occupancy

kernels = {}
if profile.kernel_stat is not None:
    for name, row in profile.kernel_stat.iterrows():
        kernels[name] = {"count": int(row["count"]), "sum": float(row["sum"]),
                         "blocks_per_sm": float(row["blocks_per_sm"]), "occupancy": float(row["occupancy"])}
out["kernels"] = kernels
out["kernel_ops"] = {
    f"{k.op_name}###{k.name}": k.calls for k in (profile.kernel_list_groupby_name_op or [])
}
out["ops_by_input"] = {
    f"{o.name}###{o.input_shape}": o.calls for o in (profile.op_list_groupby_name_input or [])
}
out["recommendations"] = profile.recommendations
out["tc_used_ratio"] = profile.tc_used_ratio
print(json.dumps(out))

"""The step breakdown of a Kineto JSON trace as TensorBoard's PyTorch profiler plugin (torch-tb-profiler)
computes it, with the plugin's own parser: percent of the average step per role. Prints JSON."""
import gzip
import json
import sys

from torch_tb_profiler.profiler.data import RunProfileData
from torch_tb_profiler.profiler.event_parser import ProfileRole

path = sys.argv[1]
raw = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
profile = RunProfileData.from_json("worker", "span", json.loads(raw))
costs = profile.avg_costs.costs
total = costs[ProfileRole.Total]
print(json.dumps({r.name: 100.0 * costs[r] / total for r in ProfileRole if r != ProfileRole.Total}))

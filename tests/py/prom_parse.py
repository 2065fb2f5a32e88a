"""Parses a Prometheus text exposition with prometheus_client's own parser (what a Prometheus-compatible scraper
accepts) and prints it as JSON: {family: {"type", "help", "samples": [{"name", "labels", "value"}]}}.
With --openmetrics, the OpenMetrics 1.0 parser (stricter: # EOF, counter family names). Usage:
prom_parse.py FILE [--openmetrics]"""
import json
import sys

if "--openmetrics" in sys.argv:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
else:
    from prometheus_client.parser import text_string_to_metric_families

out = {}
for fam in text_string_to_metric_families(open(sys.argv[1]).read()):
    out[fam.name] = {"type": fam.type, "help": fam.documentation,
                     "samples": [{"name": s.name, "labels": s.labels, "value": s.value} for s in fam.samples]}
print(json.dumps(out))

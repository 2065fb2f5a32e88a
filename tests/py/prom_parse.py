"""Parses a Prometheus text exposition with prometheus_client's own parser (what a Prometheus-compatible scraper
accepts) and prints it as JSON: {family: {"type", "help", "samples": [{"name", "labels", "value"}]}}.
Usage: prom_parse.py FILE"""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families

out = {}
for fam in text_string_to_metric_families(open(sys.argv[1]).read()):
    out[fam.name] = {"type": fam.type, "help": fam.documentation,
                     "samples": [{"name": s.name, "labels": s.labels, "value": s.value} for s in fam.samples]}
print(json.dumps(out))

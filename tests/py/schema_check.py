"""Validates JSON outputs against a published schema (docs/guide/schemas/), strictly: every object the schema
describes with properties is closed here (additionalProperties false) unless it says otherwise, so an output
member the schema does not describe fails, and the schema cannot fall behind the code.

Usage: schema_check.py SCHEMA OUTPUT.json...   Prints {"checked": N, "errors": [...]} as its last line.
"""
import json
import sys

import jsonschema


def closed(node):
    if isinstance(node, dict):
        if "properties" in node and "additionalProperties" not in node:
            node = dict(node, additionalProperties=False)
        return {k: closed(v) for k, v in node.items()}
    if isinstance(node, list):
        return [closed(v) for v in node]
    return node


def main():
    with open(sys.argv[1]) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(closed(schema))
    errors = []
    for path in sys.argv[2:]:
        with open(path) as f:
            doc = json.load(f)
        for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))[:5]:
            where = "/".join(str(p) for p in e.absolute_path)
            errors.append(f"{path}: at /{where}: {e.message[:300]}")
    print(json.dumps({"checked": len(sys.argv) - 2, "errors": errors}))


main()

"""Drives `cuflight mcp` with the Model Context Protocol's own Python client (the `mcp` package's stdio transport):
initialize, list the tools, call each reading tool on a trace, read the schemas it offers as resources and check
the report, stats and diff tools' results against them, send bad arguments, and check the server still answers.
Prints one JSON object of what it saw.

usage: mcp_client.py CUFLIGHT TRACE_DIR BASELINE TRACE [--allow-record PROGRAM]
"""
import asyncio, json, os, sys

import jsonschema

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def text_of(result):
    return "".join(getattr(c, "text", "") for c in result.content)


async def main():
    cuflight, trace_dir, baseline, trace = sys.argv[1:5]
    record_program = sys.argv[6] if len(sys.argv) > 6 and sys.argv[5] == "--allow-record" else None
    args = ["mcp"] + (["--allow-record", "--max-seconds", "20", "--output-dir", trace_dir] if record_program else [])
    params = StdioServerParameters(command=cuflight, args=args, env=dict(os.environ))
    seen = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            seen["protocol"] = str(getattr(init, "protocol_version", getattr(init, "protocolVersion", "")))
            seen["server"] = init.server_info.name if hasattr(init, "server_info") else init.serverInfo.name
            tools = await session.list_tools()
            seen["tools"] = sorted(t.name for t in tools.tools)
            seen["schemas_are_objects"] = all(
                (getattr(t, "input_schema", None) or getattr(t, "inputSchema"))["type"] == "object" for t in tools.tools)
            calls = {
                "list_traces": {"directory": trace_dir},
                "findings": {"traces": [trace]},
                "report": {"traces": [trace]},
                "trace_stats": {"traces": [trace], "tables": "cuda_gpu_kern_sum"},
                "kernel": {"traces": [trace], "name": "sgemm"},
                "step": {"traces": [trace], "n": 2},
                "diff": {"baseline": baseline, "candidate": trace},
            }
            results, texts = {}, {}
            for name, arguments in calls.items():
                r = await session.call_tool(name, arguments)
                text = text_of(r)
                texts[name] = text
                is_error = bool(getattr(r, "is_error", getattr(r, "isError", False)))
                parsed = None
                try:
                    parsed = json.loads(text)
                except ValueError:
                    pass
                results[name] = {"is_error": is_error, "json": parsed is not None, "bytes": len(text),
                                 "keys": sorted(parsed.keys()) if isinstance(parsed, dict) else None,
                                 "head": text[:300]}
            seen["calls"] = results
            # The schemas as resources, and the tools' results checked against them.
            listed = await session.list_resources()
            uris = sorted(str(r.uri) for r in listed.resources)
            seen["resources"] = uris
            valid = {}
            for tool, of in {"report": "report", "trace_stats": "stats", "diff": "diff"}.items():
                read = await session.read_resource("cuflight://schema/" + of)
                schema = json.loads(read.contents[0].text)
                document = json.loads(texts[tool])
                errors = [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(document)]
                valid[tool] = errors[:3] or "valid"
            seen["valid_against_schema"] = valid
            try:
                await session.read_resource("cuflight://schema/nope")
                seen["unknown_resource"] = "answered"
            except Exception as e:  # the SDK's MCPError
                seen["unknown_resource"] = "jsonrpc:" + str(e)[:200]
            # A bad argument: a JSON-RPC error (the SDK raises), never a crash.
            errors = {}
            for name, arguments in {"kernel": {"traces": [trace]}, "no_such_tool": {}, "step": {"traces": [trace], "n": 0},
                                    "record_process": {"pid": 1, "seconds": 1}}.items():
                try:
                    r = await session.call_tool(name, arguments)
                    errors[name] = "result:" + ("error " if getattr(r, "is_error", getattr(r, "isError", False)) else "") + text_of(r)[:200]
                except Exception as e:  # the SDK's MCPError
                    errors[name] = "jsonrpc:" + str(e)[:200]
            seen["bad_calls"] = errors
            # A value that looks like an option stays a value, and the failure says what was wrong with it.
            r = await session.call_tool("trace_stats", {"traces": [trace], "tables": "--output=x"})
            seen["option_like_value"] = {"is_error": bool(getattr(r, "is_error", getattr(r, "isError", False))),
                                         "text": text_of(r)[:300]}
            missing = await session.call_tool("findings", {"traces": [os.path.join(trace_dir, "missing.cuf")]})
            seen["missing_trace"] = {"is_error": bool(getattr(missing, "is_error", getattr(missing, "isError", False))),
                                     "text": text_of(missing)[:300]}
            await session.send_ping()
            seen["alive_after_errors"] = True
            if record_program:
                # Twice at once: two traces, neither taken for the other.
                for key in ("record_command", "record_command_again"):
                    r = await session.call_tool("record_command", {"command": [record_program, "3"]})
                    seen[key] = {"is_error": bool(getattr(r, "is_error", getattr(r, "isError", False))),
                                 "text": text_of(r)[:600]}
                # A call that runs for a while, with the SDK's own progress token: told to be running meanwhile.
                told = []

                async def progress(done, total, message):
                    told.append({"progress": done, "message": message})

                r = await session.call_tool("record_command", {"command": ["sleep", "6"]}, progress_callback=progress)
                seen["progress"] = told
    print(json.dumps(seen))


asyncio.run(main())

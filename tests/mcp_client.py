"""Drives `cairn mcp` with the official Python MCP SDK (a client no one here wrote).

Usage: mcp_client.py CAIRN_BINARY DB VAULT STDERR_LOG
Exits non-zero with a message on the first expectation that fails.
"""
import asyncio
import json
import os
import sys

from mcp import ClientSession, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client


def text(result):
    assert not result.is_error, f"tool error: {result.content}"
    return json.loads(result.content[0].text)


async def main(cairn, db, vault, log_path):
    env = {k: v for k, v in os.environ.items() if k.startswith(("CAIRN_", "ORT_", "RUST_", "HOME", "PATH"))}
    params = StdioServerParameters(command=cairn, args=["mcp", "--db", db, "--source", f"notes={vault}"], env=env)
    with open(log_path, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = {t.name: t for t in (await session.list_tools()).tools}
                assert {"search", "check", "get", "diagnose", "status"} <= set(tools), sorted(tools)
                listed = json.dumps([t.model_dump(mode="json", exclude_none=True) for t in tools.values()])
                print(f"tools/list: {len(listed)} bytes, about {len(listed) // 4} tokens")
                assert "exists" in tools["search"].description, tools["search"].description

                # Until the owner has compared the folder with the index, an answer says
                # `scanning:notes` and gives no pending count (changes made while nothing
                # watched are not known yet); a loaded machine asks before the scan ends.
                for _ in range(1200):
                    found = text(await session.call_tool("search", {"query": "hall of light"}))
                    if not any(d.startswith("scanning:") for d in found["degraded"]):
                        break
                    assert "pending_changes" not in found, found
                    await asyncio.sleep(0.05)
                else:
                    raise AssertionError(f"the folder was never compared: {found['degraded']}")
                top = found["results"][0]
                assert top["slug"] == "venues/amphitheater", top
                assert top["create_safety"] == "exists", top
                assert "alias_hit" in top["evidence"], top
                assert "pending_changes" in found, found.keys()
                # Sized for an agent: snippets by default (no scoring internals), full on request,
                # and under a token bound with what was left out said.
                assert "base_score" not in top and "chunk" in top, top
                full = text(await session.call_tool("search", {"query": "hall of light", "detail": "full"}))
                assert "base_score" in full["results"][0], full["results"][0]
                ids = text(await session.call_tool("search", {"query": "owls", "detail": "ids"}))
                assert set(ids["results"][0]) == {"source", "slug", "title", "create_safety", "evidence"}, ids
                def size(answer):
                    return len(json.dumps(answer, separators=(",", ":"), ensure_ascii=False).encode())
                whole = text(await session.call_tool("search", {"query": "owls"}))
                # A margin under the whole answer: its timings' digits differ from call to call.
                bound = size(whole) // 4 - 32
                small = text(await session.call_tool("search", {"query": "owls", "max_tokens": bound}))
                assert small.get("truncated") is True and small["left_out"]["results"] >= 1, small
                assert size(small) <= bound * 4, (size(small), bound)

                # A draft before it is written: its title is a page's alias; its body is an existing
                # page's subject under a new title; or nothing of it is here.
                named = text(await session.call_tool("check", {"title": "Hall of Light", "body": "A venue."}))
                assert named["verdict"] == "exists", named
                assert named["candidates"][0]["slug"] == "venues/amphitheater", named
                assert "edit it" in named["candidates"][0]["advice"], named
                meant = text(await session.call_tool("check", {
                    "title": "Nocturnal raptor hearing",
                    "body": "Barn owls hunt by sound, finding prey in complete darkness.",
                }))
                assert meant["verdict"] == "probable", meant
                assert meant["candidates"][0]["slug"] == "owls", meant
                assert all(c["verdict"] != "exists" for c in meant["candidates"]), meant
                new = text(await session.call_tool("check", {
                    "title": "Volcanic soils",
                    "body": "Andosols form on volcanic ash and hold water and phosphate well.",
                }))
                assert new["verdict"] in ("none", "related"), new
                assert all(c["verdict"] == "related" for c in new["candidates"]), new
                r = await session.call_tool("check", {})
                assert r.is_error and r.content[0].text, r

                page = text(await session.call_tool("get", {"source": "notes", "slug": "venues/amphitheater"}))
                assert page["title"] == "Indoor Greek Amphitheater", page
                assert "glass roof" in page["body"], page["body"]

                # Failures of a tool are results with isError and a message the agent reads (MCP
                # spec), not protocol errors.
                for bad in ({"query": "owls", "sources": ["nope"]}, {"query": "   "}, {"query": "x" * 5000}):
                    r = await session.call_tool("search", bad)
                    assert r.is_error, f"{bad} was answered: {r}"
                    assert r.content and r.content[0].text, "an error without a message"
                r = await session.call_tool("search", {"query": "owls", "sources": ["nope"]})
                assert "unknown source" in r.content[0].text, r.content
                r = await session.call_tool("get", {"source": "notes", "slug": "no/such/page"})
                assert r.is_error and "no page" in r.content[0].text, r

                # The server keeps serving after errors.
                status = text(await session.call_tool("status", {}))
                assert status["role"] == "owner" and status["owner"]["purpose"] == "mcp", status
                notes = status["sources"][0]
                assert notes["source"] == "notes" and notes["pages"] >= 3, status
                diag = text(await session.call_tool("diagnose", {"query": "hall of light", "target": "notes:venues/amphitheater"}))
                assert diag["final_rank"] == 1, diag
    with open(log_path) as f:
        log = f.read()
    assert "stopped cleanly" in log, f"the server did not report a clean stop:\n{log}"
    print("mcp client: every check passed")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))

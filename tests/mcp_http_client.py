"""Drives `cairn serve`'s /mcp with the official Python MCP SDK's streamable HTTP client.

Usage: mcp_http_client.py URL TOKEN
Exits non-zero with a message on the first expectation that fails.
"""
import asyncio
import json
import sys

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


def text(result):
    assert not result.is_error, f"tool error: {result.content}"
    return json.loads(result.content[0].text)


async def main(url, token):
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = {t.name for t in (await session.list_tools()).tools}
                assert {"search", "check", "get", "diagnose", "status"} <= tools, sorted(tools)
                found = text(await session.call_tool("search", {"query": "hall of light"}))
                top = found["results"][0]
                assert top["slug"] == "venues/amphitheater", top
                assert top["create_safety"] == "exists", top
                page = text(await session.call_tool("get", {"source": "notes", "slug": "owls"}))
                assert "Barn owls" in page["body"], page
    # Without the token, the transport is refused before MCP starts.
    async with httpx2.AsyncClient(timeout=60) as http:
        r = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                            headers={"Accept": "application/json, text/event-stream"})
        assert r.status_code == 401, (r.status_code, r.text)
    print("every check passed")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))

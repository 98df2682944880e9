#!/usr/bin/env python3
"""The official Python MCP SDK (`mcp`) against `kbdb serve` over streamable HTTP.

Usage: py_client.py URL READ_ONLY_TOKEN
Opens a session with the token, lists the tools, searches (the database holds a section titled
"Deploy day"), sees a learn refused as read-only, then sees a wrong token refused. Prints OK and
exits 0 when every step went as expected; else prints what failed and exits 1.
"""
import sys

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def session(url: str, token: str, steps):
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with client:
        async with streamable_http_client(url, http_client=client) as (read, write, *_):
            async with ClientSession(read, write) as s:
                init = await s.initialize()
                assert init.protocol_version == "2025-11-25", init.protocol_version
                await steps(s)


async def main(url: str, token: str) -> None:
    async def reads_and_refused_write(s):
        tools = {t.name for t in (await s.list_tools()).tools}
        assert {"search", "learn", "recall"} <= tools, tools
        found = await s.call_tool("search", {"query": "deploy"})
        assert not found.is_error, found
        assert "Deploy day" in found.content[0].text, found.content[0].text
        refused = await s.call_tool("learn", {"content": "x", "title": "y"})
        assert refused.is_error, refused
        assert "read-only" in refused.content[0].text, refused.content[0].text
        resources = await s.list_resources()
        assert resources is not None

    await session(url, token, reads_and_refused_write)

    async def nothing(_s):
        pass

    try:
        with anyio.fail_after(30):
            await session(url, "kbdb_not_a_token", nothing)
    except BaseException as e:  # noqa: BLE001 (an ExceptionGroup from the task group)
        text = repr(e)
        # The SDK reports the 401 as an MCP error response; a timeout would be another failure.
        assert "Timeout" not in text and "Cancelled" not in text, text
    else:
        raise AssertionError("a wrong token opened a session")
    print("OK python sdk")


if __name__ == "__main__":
    try:
        anyio.run(main, sys.argv[1], sys.argv[2])
    except BaseException as e:  # noqa: BLE001
        while isinstance(e, BaseExceptionGroup) and e.exceptions:
            e = e.exceptions[0]
        print(f"FAIL {type(e).__name__}: {e}")
        sys.exit(1)

"""A person confirms a destructive call through the official Python MCP SDK.

Run by interop-tests/tests/python.rs against `interop-server --confirm user`: in each
protocol mode (legacy: 2025-11-25, an `elicitation/create` request on the session; auto:
2026-07-28, an `InputRequiredResult` the SDK answers and retries with the
`requestState`), one note is deleted after an accept and one is kept after a decline.
It prints one JSON document of what the SDK saw; the Rust test asserts it.

    confirm_client.py stdio --command BIN --arg A ... --token T
    confirm_client.py http --url URL --token T
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import warnings
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters, types
from mcp.client.streamable_http import streamable_http_client

warnings.simplefilter("ignore")


def client(args: argparse.Namespace, mode: str, answer: str, asked: list[str]) -> Client:
    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action=answer)

    if args.transport == "stdio":
        server: Any = StdioServerParameters(command=args.command, args=args.arg, env={"AAC_TOKEN": args.token})
    else:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {args.token}"})
        server = streamable_http_client(args.url, http_client=http)
    return Client(server, mode=mode, elicitation_callback=on_elicit)


async def one(args: argparse.Namespace, mode: str, answer: str) -> dict[str, Any]:
    asked: list[str] = []
    async with client(args, mode, answer, asked) as c:
        added = await c.call_tool("add_note", {"text": f"{mode} {answer}"})
        note = added.structured_content["id"]
        deleted = await c.call_tool("delete_note", {"id": note, "confirm": True})
        listed = await c.call_tool("list_notes", {})
        ids = [n["id"] for n in listed.structured_content["notes"]]
        return {
            "protocol_version": c.protocol_version,
            "note": note,
            "asked": asked,
            "result": deleted.model_dump(mode="json", by_alias=True, exclude_none=True),
            "still_there": note in ids,
        }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=["stdio", "http"])
    parser.add_argument("--command")
    parser.add_argument("--arg", action="append", default=[])
    parser.add_argument("--url")
    parser.add_argument("--token", required=True)
    args = parser.parse_args()
    report: dict[str, Any] = {}
    for mode in ["legacy", "auto"]:
        for answer in ["accept", "decline"]:
            report[f"{mode}_{answer}"] = await one(args, mode, answer)
    json.dump(report, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    asyncio.run(main())

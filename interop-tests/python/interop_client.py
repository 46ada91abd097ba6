"""Drive an aac-tools server with the official Python MCP SDK (`mcp` on PyPI).

Run by interop-tests/tests/python.rs; it prints one JSON document of what the SDK saw,
which the Rust test asserts field by field. Nothing here decides pass or fail, except
that an unexpected exception ends the script with a non-zero status.

    interop_client.py stdio --command BIN --arg A --arg B ... --full T --reader T
    interop_client.py http --url URL --full T --reader T
    interop_client.py stdio|http ... --items    (resources, prompts and completion only)
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
from mcp.client.auth.utils import extract_field_from_www_auth
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import ProtectedResourceMetadata

warnings.simplefilter("ignore")  # logging and sampling are deprecated in 2026-07-28

MODES = ["legacy", "auto"]


def dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def result_json(result: types.CallToolResult) -> dict[str, Any]:
    out = dump(result)
    out.pop("resultType", None)
    return out


def describe(exc: BaseException) -> dict[str, Any]:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return {"type": type(exc).__name__, "message": str(exc)}


class Recorder:
    """Every HTTP response the SDK received, with its WWW-Authenticate challenge."""

    def __init__(self) -> None:
        self.responses: list[dict[str, Any]] = []

    async def __call__(self, response: httpx2.Response) -> None:
        entry: dict[str, Any] = {
            "method": response.request.method,
            "status": response.status_code,
        }
        if "WWW-Authenticate" in response.headers:
            entry["www_authenticate"] = response.headers["WWW-Authenticate"]
            for field in ("error", "scope", "resource_metadata"):
                value = extract_field_from_www_auth(response, field)
                if value is not None:
                    entry[field] = value
        self.responses.append(entry)


class Transport:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.recorder = Recorder()

    def client(self, token: str | None, mode: str, **callbacks: Any) -> Client:
        if self.args.transport == "stdio":
            env = {} if token is None else {"AAC_TOKEN": token}
            server: Any = StdioServerParameters(command=self.args.command, args=self.args.arg, env=env)
        else:
            headers = {} if token is None else {"Authorization": f"Bearer {token}"}
            http = httpx2.AsyncClient(headers=headers, event_hooks={"response": [self.recorder]})
            server = streamable_http_client(self.args.url, http_client=http)
        return Client(server, mode=mode, **callbacks)


async def full_session(transport: Transport, mode: str) -> dict[str, Any]:
    """Everything a client with every scope does."""
    logs: list[Any] = []
    progress: list[dict[str, Any]] = []
    sampled: list[Any] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append({"level": params.level, "logger": params.logger, "data": params.data})

    async def on_sampling(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        sampled.append(dump(params))
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="three short notes"),
            model="test-model",
            stop_reason="endTurn",
        )

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append({"progress": value, "total": total, "message": message})

    out: dict[str, Any] = {}
    async with transport.client(
        transport.args.full,
        mode,
        logging_callback=on_log,
        sampling_callback=on_sampling,
        log_level="debug",
    ) as client:
        out["protocol_version"] = client.protocol_version
        out["server_name"] = client.server_info.name if client.server_info else None
        out["capabilities"] = dump(client.server_capabilities)
        out["tools"] = [dump(tool) for tool in (await client.list_tools()).tools]
        if mode == "legacy":
            # Both were removed in 2026-07-28 (logging moved to a per-request `_meta` level).
            await client.send_ping()
            out["ping"] = True
            await client.set_logging_level("debug")
        calls: dict[str, Any] = {}

        async def call(label: str, name: str, arguments: dict[str, Any] | None, **kw: Any) -> dict[str, Any]:
            calls[label] = result_json(await client.call_tool(name, arguments, **kw))
            return calls[label]

        added = await call("add_note", "add_note", {"text": "from python"})
        note_id = added.get("structuredContent", {}).get("id")
        await call("list_notes", "list_notes", {})
        await call("delete_without_confirm", "delete_note", {"id": note_id})
        await call("delete_confirm_false", "delete_note", {"id": note_id, "confirm": False})
        await call("delete_confirmed", "delete_note", {"id": note_id, "confirm": True})
        await call("add_empty_text", "add_note", {"text": ""})
        await call("add_wrong_type", "add_note", {"text": 5})
        await call("add_unknown_field", "add_note", {"text": "x", "colour": "red"})
        await call("unknown_tool", "no_such_tool", {})
        await call("count_slowly", "count_slowly", {"to": 3}, progress_callback=on_progress)
        await call("summarize_notes", "summarize_notes", {})
    out["calls"] = calls
    out["logs"] = logs
    out["progress"] = progress
    out["sampling_requests"] = sampled
    return out


async def without_log_opt_in(transport: Transport) -> int:
    """On 2026-07-28 a request opts in to log messages with a level in `_meta`; without
    one, none may arrive. The number that did."""
    logs: list[Any] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    async with transport.client(transport.args.full, "auto", logging_callback=on_log) as client:
        await client.call_tool("count_slowly", {"to": 2})
    return len(logs)


async def refused_session(transport: Transport, token: str | None, mode: str) -> dict[str, Any]:
    """A client with a missing, bad or under-scoped token: what it can and cannot do."""
    out: dict[str, Any] = {}
    try:
        async with transport.client(token, mode) as client:
            out["connected"] = True
            out["tools_listed"] = len((await client.list_tools()).tools)
            try:
                out["add_note"] = result_json(await client.call_tool("add_note", {"text": "nope"}))
            except Exception as exc:  # noqa: BLE001 - recorded for the Rust test
                out["add_note_error"] = describe(exc)
            try:
                out["list_notes"] = result_json(await client.call_tool("list_notes", {}))
            except Exception as exc:  # noqa: BLE001
                out["list_notes_error"] = describe(exc)
    except BaseException as exc:  # noqa: BLE001 - connection refused by the server
        out["connected"] = False
        out["error"] = describe(exc)
    return out


def rpc_error(exc: BaseException) -> dict[str, Any]:
    """A JSON-RPC error as the SDK raised it: code, message and data."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    error = getattr(exc, "error", None)
    if error is None:
        return describe(exc)
    return {"code": error.code, "message": error.message, "data": error.data}


async def attempt(out: dict[str, Any], label: str, action: Any) -> None:
    """Run one read; its result, or the error the SDK raised, under `label`."""
    try:
        out[label] = dump(await action())
    except Exception as exc:  # noqa: BLE001 - recorded for the Rust test
        out[label + "_error"] = rpc_error(exc)


async def items_session(transport: Transport, token: str | None, full: bool) -> dict[str, Any]:
    """Resources, prompts and completion: everything a client does with them."""
    out: dict[str, Any] = {}
    mode = transport.args.items_mode
    try:
        async with transport.client(token, mode) as client:
            out["connected"] = True
            out["capabilities"] = dump(client.server_capabilities)
            out["resources"] = [dump(r) for r in (await client.list_resources()).resources]
            out["templates"] = [dump(t) for t in (await client.list_resource_templates()).resource_templates]
            out["prompts"] = [dump(p) for p in (await client.list_prompts()).prompts]
            note_id = None
            if full:
                added = result_json(await client.call_tool("add_note", {"text": "read me"}))
                note_id = added.get("structuredContent", {}).get("id")
            await attempt(out, "read_all", lambda: client.read_resource("notes://all"))
            await attempt(out, "read_note", lambda: client.read_resource(f"notes://notes/{note_id}"))
            await attempt(out, "read_missing_note", lambda: client.read_resource("notes://notes/424242"))
            await attempt(out, "read_unknown", lambda: client.read_resource("notes://nothing"))
            await attempt(out, "read_admin", lambda: client.read_resource("notes://admin/count"))
            await attempt(out, "get_review", lambda: client.get_prompt("review_note", {"id": str(note_id)}))
            await attempt(out, "get_review_no_args", lambda: client.get_prompt("review_note", {}))
            await attempt(out, "get_purge", lambda: client.get_prompt("purge_plan", {}))
            await attempt(out, "get_unknown", lambda: client.get_prompt("no_such_prompt", {}))
            await attempt(
                out,
                "complete_prompt",
                lambda: client.complete(types.PromptReference(type="ref/prompt", name="review_note"), {"name": "id", "value": ""}),
            )
            await attempt(
                out,
                "complete_template",
                lambda: client.complete(
                    types.ResourceTemplateReference(type="ref/resource", uri="notes://notes/{id}"),
                    {"name": "id", "value": str(note_id)[:1]},
                ),
            )
            if full and mode == "legacy":
                # 2026-07-28 removed resources/subscribe.
                await attempt(out, "subscribe", lambda: client.subscribe_resource("notes://all"))
                await attempt(out, "unsubscribe", lambda: client.unsubscribe_resource("notes://all"))
            out["note_id"] = note_id
    except BaseException as exc:  # noqa: BLE001 - connection refused by the server
        out["connected"] = False
        out["error"] = describe(exc)
    return out


async def items_report(transport: Transport) -> dict[str, Any]:
    report: dict[str, Any] = {"sdk": "mcp"}
    for label, token, full in [
        ("full", transport.args.full, True),
        ("reader", transport.args.reader, False),
        ("no_token", None, False),
    ]:
        transport.recorder.responses.clear()
        report[label] = await items_session(transport, token, full)
        report[label]["http"] = list(transport.recorder.responses)
    return report


async def resource_metadata(url: str) -> dict[str, Any]:
    """Fetch the RFC 9728 document the 401 pointed to, and validate it with the SDK's model."""
    async with httpx2.AsyncClient() as http:
        response = await http.get(url)
    metadata = ProtectedResourceMetadata.model_validate_json(response.content)
    return {"status": response.status_code, "metadata": dump(metadata)}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=["stdio", "http"])
    parser.add_argument("--command")
    parser.add_argument("--arg", action="append", default=[])
    parser.add_argument("--url")
    parser.add_argument("--full", required=True)
    parser.add_argument("--reader", required=True)
    parser.add_argument("--items", action="store_true")
    parser.add_argument("--items-mode", choices=MODES, default="legacy")
    args = parser.parse_args()
    transport = Transport(args)
    if args.items:
        json.dump(await items_report(transport), sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return

    report: dict[str, Any] = {"sdk": "mcp", "modes": {}}
    for mode in MODES:
        transport.recorder.responses.clear()
        entry: dict[str, Any] = {"full": await full_session(transport, mode)}
        for label, token in [("no_token", None), ("bad_token", "aac_000000000000_" + "0" * 64), ("reader", args.reader)]:
            transport.recorder.responses.clear()
            entry[label] = await refused_session(transport, token, mode)
            entry[label]["http"] = list(transport.recorder.responses)
        if mode == "auto":
            entry["logs_without_opt_in"] = await without_log_opt_in(transport)
        report["modes"][mode] = entry

    if args.transport == "http":
        challenge = next(
            (r for r in report["modes"]["legacy"]["no_token"]["http"] if "resource_metadata" in r),
            None,
        )
        if challenge is not None:
            report["resource_metadata"] = await resource_metadata(challenge["resource_metadata"])

    json.dump(report, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    asyncio.run(main())

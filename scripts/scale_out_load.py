#!/usr/bin/env python3
"""The load of the scale-out test (scripts/scale-out), standard library only.

CLIENTS threads send CALLS requests each through the balancer to the replicas of
`aacworkflow serve --http --stateless`, a mix of reads, writes (new issues, comments) and
calls the server refuses, each with a unique X-Request-Id; after KILL_AFTER answers
the replica KILL_PID is killed with SIGKILL. Every answer is written to OUT as one JSON
line: {"id", "tool", "kind", "status", "body", "text"}. Then check() compares the answers
with the database and the audit trail.
"""

import http.client
import json
import os
import signal
import sys
import threading
import uuid


def call(host, port, tool, token, body, request_id):
    conn = http.client.HTTPConnection(host, port, timeout=30)
    headers = {"Content-Type": "application/json", "X-Request-Id": request_id}
    if token:
        headers["Authorization"] = "Bearer " + token
    try:
        conn.request("POST", "/tools/" + tool, body=json.dumps(body), headers=headers)
        response = conn.getresponse()
        data = response.read()
        try:
            parsed = json.loads(data)
        except ValueError:
            parsed = None
        return response.status, parsed
    except OSError as err:  # the connection itself failed
        return 0, {"transport_error": str(err)}
    finally:
        conn.close()


def mcp_call(host, port, version, tool, token, arguments, request_id):
    """A stateless `tools/call` on /mcp: protocol 2026-07-28 (standard headers and `_meta`)
    or 2025-06-18 (no initialize, no session). Answered 200 when the result is not an
    error; otherwise the HTTP status, or the `status` of the error result."""
    conn = http.client.HTTPConnection(host, port, timeout=30)
    params = {"name": tool, "arguments": arguments}
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": version,
        "Authorization": "Bearer " + token,
    }
    if version == "2026-07-28":
        headers["Mcp-Method"] = "tools/call"
        headers["Mcp-Name"] = tool
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    try:
        conn.request("POST", "/mcp", body=json.dumps(body), headers=headers)
        response = conn.getresponse()
        data = response.read()
        try:
            parsed = json.loads(data)
        except ValueError:
            return response.status, None
        result = parsed.get("result") if isinstance(parsed, dict) else None
        if response.status == 200 and result is not None:
            if not result.get("isError"):
                return 200, {"mcp": result.get("structuredContent")}
            err = result.get("structuredContent") or json.loads(result["content"][0]["text"])
            return err.get("status", 500), err
        return response.status, parsed
    except OSError as err:
        return 0, {"transport_error": str(err)}
    finally:
        conn.close()


def load(args):
    host, port = args["balancer"].rsplit(":", 1)
    port = int(port)
    writer, reader, viewer = args["writer"], args["reader"], args["viewer"]
    answers = []
    lock = threading.Lock()
    killed = threading.Event()

    def client(n):
        for i in range(args["calls"]):
            request_id = f"c{n}-{i}-{uuid.uuid4().hex[:8]}"
            kind = ("write", "read", "scope", "comment", "read", "no_token", "confirm", "read",
                    "viewer", "read")[(n + i) % 10]
            # Token-less refusals are recorded at most 60 a minute per peer address (past
            # that, 429 and one record counting them), and behind a balancer every peer
            # is the balancer: keep them under that rate, so each has its own record.
            if kind == "no_token" and (n + i) % 50 != 5:
                kind = "read"
            text = None
            if kind == "write":
                text = f"issue {request_id}"
                tool = "create_issue"
                status, body = call(host, port, tool, writer, {"title": text}, request_id)
            elif kind == "comment":
                text = f"comment {request_id}"
                tool = "comment_issue"
                status, body = call(host, port, tool, writer,
                                    {"issue_id": "AAC-1", "body": text}, request_id)
            elif kind == "read":
                # Reads go three ways: REST, MCP 2026-07-28, stateless MCP 2025-06-18.
                way = (n + i) % 3
                if way == 0:
                    tool = "list_issues"
                    status, body = call(host, port, tool, reader, {"limit": 5}, request_id)
                else:
                    version = "2026-07-28" if way == 1 else "2025-06-18"
                    tool = "get_issue"
                    status, body = mcp_call(host, port, version, tool, reader,
                                            {"issue_id": "AAC-1"}, request_id)
                    kind = "read_mcp_" + version
            elif kind == "scope":
                tool = "create_issue"
                status, body = call(host, port, tool, reader, {"title": "no"}, request_id)
            elif kind == "viewer":
                tool = "create_issue"
                status, body = call(host, port, tool, viewer, {"title": "no"}, request_id)
            elif kind == "no_token":
                tool = "list_issues"
                status, body = call(host, port, tool, None, {}, request_id)
            else:
                tool = "delete_issue"
                status, body = call(host, port, tool, writer, {"issue_id": "AAC-1"}, request_id)
            with lock:
                answers.append(
                    {"id": request_id, "tool": tool, "kind": kind, "status": status, "body": body,
                     "text": text, "after_kill": killed.is_set()}
                )
                if len(answers) >= args["kill_after"] and not killed.is_set():
                    killed.set()
                    os.kill(args["kill_pid"], signal.SIGKILL)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(args["clients"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(args["out"], "w") as f:
        for a in answers:
            f.write(json.dumps(a) + "\n")
    print(f"load: {len(answers)} answers, killed: {killed.is_set()}", file=sys.stderr)


def check(answers_file, audit_file, notes_file, expect_kill):
    """Every 200 in the data (writes) and the trail; every refusal in the trail."""
    answers = [json.loads(l) for l in open(answers_file)]
    records = {}
    for line in open(audit_file):
        r = json.loads(line)
        if r.get("request_id"):
            records.setdefault(r["request_id"], []).append(r)
    notes = set(l.rstrip("\n") for l in open(notes_file))
    problems = []
    by_status = {}
    for a in answers:
        by_status[a["status"]] = by_status.get(a["status"], 0) + 1
        ours = isinstance(a["body"], dict) and ("reason" in a["body"] or a["status"] == 200)
        if a["status"] == 200:
            recs = records.get(a["id"], [])
            if len(recs) != 1 or recs[0]["status"] != 200 or recs[0]["outcome"] != "success":
                problems.append(f"{a['id']}: answered 200, recorded {recs}")
            if a["kind"] in ("write", "comment") and a["text"] not in notes:
                problems.append(f"{a['id']}: answered 200 but its note is not in the data")
        elif ours and 400 <= a["status"] < 600 and a["body"].get("reason"):
            recs = records.get(a["id"], [])
            if len(recs) != 1 or recs[0]["status"] != a["status"] or recs[0]["reason"] != a["body"]["reason"]:
                problems.append(f"{a['id']}: answered {a['status']} {a['body']['reason']}, recorded {recs}")
    expected = {"write": 200, "comment": 200, "read": 200, "read_mcp_2026-07-28": 200,
                "read_mcp_2025-06-18": 200, "scope": 403, "viewer": 403, "no_token": 401,
                "confirm": 400}
    reasons = {"scope": "insufficient_scope", "viewer": "forbidden", "no_token": "missing_token",
               "confirm": "destructive_flag_missing"}
    refused = {}
    for a in answers:
        if a["status"] == 200 or (isinstance(a["body"], dict) and a["body"].get("reason")):
            if a["status"] != expected[a["kind"]] and a["status"] not in (429, 503):
                problems.append(f"{a['id']}: {a['kind']} answered {a['status']} {a['body']}")
            elif a["kind"] in reasons and a["status"] == expected[a["kind"]]:
                if a["body"].get("reason") != reasons[a["kind"]]:
                    problems.append(f"{a['id']}: {a['kind']} refused for {a['body']}")
                refused[a["kind"]] = refused.get(a["kind"], 0) + 1
    print(f"check: refused as expected by kind {dict(sorted(refused.items()))}")
    for kind in reasons:
        if not refused.get(kind):
            problems.append(f"no `{kind}` call was refused as it should be")
    served_after = sum(1 for a in answers if a["after_kill"] and a["status"] == 200)
    if expect_kill:
        if not any(a["after_kill"] for a in answers):
            problems.append("no call was answered after the kill")
        elif served_after == 0:
            problems.append("no call succeeded after the kill")
        print(f"check: {served_after} calls answered 200 after the kill")
    for id_, recs in records.items():
        if len(recs) > 1:
            problems.append(f"{id_}: {len(recs)} records")
    kinds = {}
    for a in answers:
        kinds[a["kind"]] = kinds.get(a["kind"], 0) + (a["status"] == 200)
    print(f"check: answered 200 by kind {dict(sorted(kinds.items()))}")
    for kind in ("write", "comment", "read", "read_mcp_2026-07-28", "read_mcp_2025-06-18"):
        if not kinds.get(kind):
            problems.append(f"no `{kind}` call was answered 200")
    print(f"check: answers by status {dict(sorted(by_status.items()))}; {len(records)} records with a request id")
    for p in problems[:20]:
        print("problem:", p)
    return not problems


if __name__ == "__main__":
    if sys.argv[1] == "load":
        load(json.loads(sys.argv[2]))
    else:
        sys.exit(0 if check(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] == "1") else 1)

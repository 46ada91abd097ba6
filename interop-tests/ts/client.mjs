// Drive an aac-tools server with an official TypeScript MCP client: the 1.x SDK
// (`@modelcontextprotocol/sdk`) or the 2.x client (`@modelcontextprotocol/client`).
//
// Run by interop-tests/tests/typescript.rs; it prints one JSON document of what the
// client saw, which the Rust test asserts field by field. Nothing here decides pass or
// fail, except that an unexpected exception ends the script with a non-zero status.
//
//     node client.mjs v1|v2 PLAN_JSON
//
// PLAN_JSON is
//
//     {"transport": "stdio", "command": BIN, "args": [...], "env": {...},   (stdio)
//      "transport": "http", "url": URL,                                      (http)
//      "version_negotiation": {"mode": "auto"},                          (optional, 2.x)
//      "elicit": "accept" | "decline",          (optional: answer every elicitation so)
//      "sessions": [{"label": L, "token": T | null,
//                    "calls": [{"label": L, "name": TOOL, "arguments": {...}}],
//                    "items": [{"label": L, "op": "list_resources" | "list_templates" |
//                               "list_prompts" | "read" | "get" | "complete", ...}]}]}
//
// An item `read` has a `uri`; `get` a `name` and `arguments`; `complete` a `ref` and an
// `argument` ({name, value}).
//
// Each session is a new client: over stdio a new server process with `AAC_TOKEN=T`
// (none if null), over HTTP a new MCP session with `Authorization: Bearer T`.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const [sdk, planJson] = process.argv.slice(2);
if (!['v1', 'v2'].includes(sdk) || planJson === undefined) {
    console.error('usage: node client.mjs v1|v2 PLAN_JSON');
    process.exit(2);
}
const plan = JSON.parse(planJson);

function packageVersion(name) {
    const path = join(import.meta.dirname, 'node_modules', name, 'package.json');
    return JSON.parse(readFileSync(path, 'utf8')).version;
}

let Client, StdioClientTransport, StreamableHTTPClientTransport, packageName;
if (sdk === 'v1') {
    packageName = '@modelcontextprotocol/sdk';
    ({ Client } = await import('@modelcontextprotocol/sdk/client/index.js'));
    ({ StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js'));
    ({ StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js'));
} else {
    packageName = '@modelcontextprotocol/client';
    ({ Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client'));
    ({ StdioClientTransport } = await import('@modelcontextprotocol/client/stdio'));
}

/** An exception as the Rust test wants to see it. */
function describe(error) {
    const out = { name: error?.constructor?.name ?? typeof error, message: String(error?.message ?? error) };
    if (error?.code !== undefined) out.code = error.code;
    if (error?.data !== undefined) out.data = error.data;
    return out;
}

/** Every HTTP response the client received, with its WWW-Authenticate challenge. */
function recordingFetch(responses) {
    return async (input, init) => {
        const response = await fetch(input, init);
        const entry = { method: init?.method ?? 'GET', status: response.status };
        const challenge = response.headers.get('www-authenticate');
        if (challenge !== null) entry.www_authenticate = challenge;
        responses.push(entry);
        return response;
    };
}

function transportFor(token, responses) {
    if (plan.transport === 'stdio') {
        const env = { ...(plan.env ?? {}) };
        if (token !== null) env.AAC_TOKEN = token;
        return new StdioClientTransport({ command: plan.command, args: plan.args ?? [], env, stderr: 'inherit' });
    }
    const headers = token === null ? {} : { Authorization: `Bearer ${token}` };
    return new StreamableHTTPClientTransport(new URL(plan.url), {
        requestInit: { headers },
        fetch: recordingFetch(responses),
    });
}

async function runSession(session) {
    const responses = [];
    const out = { http: responses };
    const options = { capabilities: plan.elicit === undefined ? {} : { elicitation: { form: {} } } };
    // 2.x only: `{"mode": "auto"}` negotiates 2026-07-28 (`server/discover`) when the
    // server has it; the default is the 2025 `initialize` handshake.
    if (plan.version_negotiation !== undefined) options.versionNegotiation = plan.version_negotiation;
    const client = new Client({ name: `aac-interop-ts-${sdk}`, version: '1.0.0' }, options);
    if (plan.elicit !== undefined) {
        // The person: every question recorded, every answer `plan.elicit`. On 2026-07-28
        // the client answers an `input_required` result through this same handler.
        out.asked = [];
        client.setRequestHandler('elicitation/create', async request => {
            out.asked.push(request.params.message);
            return { action: plan.elicit };
        });
    }
    const transport = transportFor(session.token, responses);
    try {
        await client.connect(transport);
    } catch (error) {
        out.connected = false;
        out.error = describe(error);
        await client.close().catch(() => {});
        return out;
    }
    out.connected = true;
    out.server_name = client.getServerVersion()?.name ?? null;
    out.protocol_version =
        (client.getNegotiatedProtocolVersion?.() ?? transport.protocolVersion ?? null);
    try {
        out.tools = (await client.listTools()).tools;
    } catch (error) {
        out.tools_error = describe(error);
    }
    out.calls = {};
    for (const call of session.calls ?? []) {
        try {
            out.calls[call.label] = {
                result: await client.callTool({ name: call.name, arguments: call.arguments }),
            };
        } catch (error) {
            out.calls[call.label] = { error: describe(error) };
        }
    }
    out.items = {};
    for (const item of session.items ?? []) {
        const run = {
            list_resources: () => client.listResources(),
            list_templates: () => client.listResourceTemplates(),
            list_prompts: () => client.listPrompts(),
            read: () => client.readResource({ uri: item.uri }),
            get: () => client.getPrompt({ name: item.name, arguments: item.arguments }),
            complete: () => client.complete({ ref: item.ref, argument: item.argument }),
        }[item.op];
        try {
            out.items[item.label] = { result: await run() };
        } catch (error) {
            out.items[item.label] = { error: describe(error) };
        }
    }
    await client.close();
    return out;
}

const report = { sdk: packageName, version: packageVersion(packageName), node: process.version, sessions: {} };
for (const session of plan.sessions) {
    report.sessions[session.label] = await runSession(session);
}
process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);

//! Runs every benchmark of issue 9 in one go and prints the Markdown report:
//!
//! ```text
//! cargo run --release -p aac-bench --bin bench-all [-- options]
//! ```
//!
//! Options: `--rounds N` (default 3), `--secs S` measured seconds per scenario (default
//! 2), `--compile-rounds N` (default 2), `--skip-pipeline`, `--skip-e2e`,
//! `--skip-compile`, `--variants anbcd` (n: a-normal), `--compile-dir DIR`, `--out FILE`,
//! `--postgres URL` (a user that may create databases and roles: adds the variant (p), the
//! durable PostgreSQL audit, to the end-to-end runs, each server on a fresh database, with
//! one durable commit's latency measured every round; and the reference server on
//! PostgreSQL against SQLite, 1→3 replicas, see `benches/src/postgres.rs`).
//!
//! `bench-all serve <a|n|b|m|c|d|p> <stdio|http> [audit-db]` is the benchmark server itself
//! (m: a-count, records handed to a sink that keeps nothing; p: the audit-db is the URL of
//! an empty PostgreSQL database): the load generator starts this same binary so that one
//! build serves both sides.
//! `bench-all drive <a|n|b|m|c|d|p> <stdio|stdio-pipelined|http-N> <secs>` runs one scenario
//! against one server (to profile that server), `bench-all profile …` one in-process
//! call path, and `bench-all attribute [--rounds N] [--secs S]` only the table of where a
//! lone client's audit time goes (part of every full run).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aac_bench::compile;
use aac_bench::load::{Plan, ServerProcess, http_run};
use aac_bench::mem::{RssSampler, cpu_time, rss_kib};
use aac_bench::pipeline::{Fixture, McpSession};
use aac_bench::postgres_audit;
use aac_bench::report::{self, EndToEnd, Goal, Memory, PipelineLine};
use aac_bench::rmcp_flavour::{PerCallRouter, StoredRouter};
use aac_bench::stats::median;
use aac_bench::tools::TOOL_COUNT;
use aac_bench::variant::{self, TransportKind, Variant};

#[path = "../postgres.rs"]
mod postgres;

struct Options {
    rounds: usize,
    secs: f64,
    compile_rounds: usize,
    pipeline: bool,
    e2e: bool,
    compile: bool,
    variants: Vec<Variant>,
    compile_dir: PathBuf,
    out: Option<PathBuf>,
    postgres: Option<String>,
}

fn parse_options(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        rounds: 3,
        secs: 2.0,
        compile_rounds: 2,
        pipeline: true,
        e2e: true,
        compile: true,
        variants: Variant::ALL.to_vec(),
        compile_dir: std::env::temp_dir().join("aac-bench-compile"),
        out: None,
        postgres: None,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("`{arg}` needs a value"));
        match arg.as_str() {
            "--rounds" => o.rounds = value()?.parse().map_err(|_| "bad --rounds")?,
            "--secs" => o.secs = value()?.parse().map_err(|_| "bad --secs")?,
            "--compile-rounds" => {
                o.compile_rounds = value()?.parse().map_err(|_| "bad --compile-rounds")?
            }
            "--skip-pipeline" => o.pipeline = false,
            "--skip-e2e" => o.e2e = false,
            "--skip-compile" => o.compile = false,
            "--variants" => {
                o.variants = value()?
                    .chars()
                    .map(|c| Variant::from_key(&c.to_string()).ok_or(format!("no variant `{c}`")))
                    .collect::<Result<_, _>>()?
            }
            "--compile-dir" => o.compile_dir = value()?.into(),
            "--out" => o.out = Some(value()?.into()),
            "--postgres" => o.postgres = Some(value()?),
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    // With `--postgres`, (p) is measured beside the others.
    if o.postgres.is_some() && !o.variants.contains(&Variant::AacPostgres) {
        o.variants.push(Variant::AacPostgres);
    }
    if o.rounds == 0 || o.compile_rounds == 0 || o.secs <= 0.0 {
        return Err("rounds and seconds must be positive".to_owned());
    }
    Ok(o)
}

fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("serve") => return serve(&args[1..]),
        Some("profile") => return profile(&args[1..]),
        Some("drive") => return drive(&args[1..]),
        Some("attribute") => {
            // Only the attribution of a lone client's audit time, with the options of a
            // full run (`--rounds`, `--secs`).
            let options = parse_options(&args[1..]).map_err(io::Error::other)?;
            let mut out = String::new();
            report::attribution_table(&mut out, &attribution(&options)?);
            println!("{out}");
            return Ok(());
        }
        _ => {}
    }
    let options = parse_options(&args).map_err(io::Error::other)?;
    if options.postgres.is_some() {
        // The run ends with the reference server on PostgreSQL: say now, not after every
        // other measurement, that its binary is missing.
        postgres::aacworkflow_bin()?;
    }
    if cfg!(debug_assertions) {
        eprintln!(
            "warning: a debug build; run with `cargo run --release -p aac-bench --bin bench-all`"
        );
    }
    let mut out = String::new();
    out.push_str("# aac-tools benchmarks\n\n");
    out.push_str(&format!("Machine: {}.\n\n", report::machine()));
    let mut goals = Vec::new();

    if options.pipeline {
        eprintln!("== the pipeline alone, in process");
        let (lines, mcp_lines) = pipeline_section()?;
        out.push_str("## The pipeline alone (in process, no I/O)\n\n");
        report::pipeline_table(&mut out, &lines, "rmcp stored router", Some("bare handler"));
        out.push('\n');
        out.push_str(
            "## Through MCP, in process (JSON-RPC lines over an in-memory stream, one runtime thread)\n\n",
        );
        report::pipeline_table(&mut out, &mcp_lines, MCP_CALL_BASELINE, None);
        out.push('\n');
        let mcp = |w: &str| mcp_lines.iter().find(|l| l.what == w).map(|l| l.ns);
        if let (Some(aac), Some(rmcp)) = (mcp(MCP_LIST_AAC), mcp(MCP_LIST_RMCP)) {
            goals.push(Goal {
                what: "`tools/list` of 150 through MCP: aac-tools / rmcp stored router, time"
                    .into(),
                value: aac / rmcp,
                bound: 1.0,
                at_least: false,
            });
        }
        let get = |w: &str| lines.iter().find(|l| l.what == w).map(|l| l.ns);
        if let (Some(full), Some(bare)) = (
            get("aac-tools, audit record (null sink)"),
            get("bare handler"),
        ) {
            goals.push(Goal {
                what: "pipeline cost per call, µs (aac-tools with audit record, less the bare handler)".into(),
                value: (full - bare) / 1000.0,
                bound: 5.0,
                at_least: false,
            });
        }
    }

    if options.e2e {
        eprintln!("== end to end");
        let (e2e, memory, syncs, pg_commits) = end_to_end(&options)?;
        out.push_str("## End to end: `tools/call` on a 150-tool server\n\n");
        out.push_str(&format!(
            "{} rounds of {:.1} s per scenario and server; throughput is the median over rounds, \
             latencies are over every call of every round, ratios are taken within a round and \
             their median reported.\n\n",
            options.rounds, options.secs
        ));
        report::end_to_end_table(&mut out, &e2e, &SCENARIO_NAMES, &options.variants);
        out.push('\n');
        out.push_str("## Durability: what the disk costs\n\n");
        report::durability_table(&mut out, &e2e, &SCENARIO_NAMES, &syncs);
        out.push('\n');
        out.push_str("## Memory (resident set)\n\n");
        report::memory_table(&mut out, &memory);
        out.push('\n');
        eprintln!("== where a lone client's audit time goes");
        let attribution = attribution(&options)?;
        out.push_str("## Where a lone client's audit time goes\n\n");
        report::attribution_table(&mut out, &attribution);
        out.push('\n');
        goals.extend(report::end_to_end_goals(
            &e2e,
            &SCENARIO_NAMES,
            &memory,
            &syncs,
        ));
        goals.extend(report::postgres_goals(&e2e, &SCENARIO_NAMES, &pg_commits));
    }

    if options.compile {
        eprintln!("== compile time (in {})", options.compile_dir.display());
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .ok_or_else(|| io::Error::other("no workspace"))?
            .to_path_buf();
        let times = compile::run(
            &options.compile_dir,
            &workspace,
            options.compile_rounds,
            &mut |s| eprintln!("{s}"),
        )?;
        out.push_str("## Compile time of a 150-tool crate (dev profile)\n\n");
        report::compile_table(&mut out, &times);
        out.push('\n');
        let med = |t: &compile::CompileTimes, edit: bool| {
            let v: Vec<f64> = (if edit { &t.edit } else { &t.clean })
                .iter()
                .map(Duration::as_secs_f64)
                .collect();
            median(&v)
        };
        if let [aac, rmcp] = &times[..] {
            goals.push(Goal {
                what: "compile time, clean: aac-tools / rmcp".into(),
                value: med(aac, false) / med(rmcp, false),
                bound: 1.0,
                at_least: false,
            });
            goals.push(Goal {
                what: "compile time, one-line edit: aac-tools / rmcp".into(),
                value: med(aac, true) / med(rmcp, true),
                bound: 1.0,
                at_least: false,
            });
        }
    }

    if let Some(url) = &options.postgres {
        eprintln!("== the reference server on PostgreSQL and on SQLite");
        out.push_str(&postgres::section(url, options.secs, options.rounds)?);
    }

    out.push_str("## Goals\n\n");
    report::goals_table(&mut out, &goals);
    println!("{out}");
    if let Some(path) = &options.out {
        std::fs::write(path, &out)?;
        eprintln!("report written to {}", path.display());
    }
    Ok(())
}

fn serve(args: &[String]) -> io::Result<()> {
    let usage =
        || io::Error::other("usage: bench-all serve <a|n|b|m|c|d|p> <stdio|http> [audit-db]");
    let variant = args
        .first()
        .and_then(|s| Variant::from_key(s))
        .ok_or_else(usage)?;
    let transport = args
        .get(1)
        .and_then(|s| TransportKind::parse(s))
        .ok_or_else(usage)?;
    let audit_db = args.get(2).map(PathBuf::from);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(variant::serve(variant, transport, audit_db.as_deref()))
}

/// `bench-all profile <aac|aac-audit|rmcp|mcp-aac|mcp-rmcp|mcp-aac-list|mcp-rmcp-list>
/// <calls>`: one in-process call path in a loop, for a profiler
/// (`valgrind --tool=callgrind`, `perf record`). The `mcp-` paths go through MCP over an
/// in-memory stream.
fn profile(args: &[String]) -> io::Result<()> {
    let usage = || {
        io::Error::other(
            "usage: bench-all profile <aac|aac-audit|rmcp|mcp-aac|mcp-rmcp|mcp-aac-list|mcp-rmcp-list> <calls>",
        )
    };
    let what = args.first().ok_or_else(usage)?;
    let calls: usize = args.get(1).and_then(|s| s.parse().ok()).ok_or_else(usage)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let fx = rt.block_on(async { Fixture::new() });
    let mut session = match what.as_str() {
        "mcp-aac" | "mcp-aac-list" => Some(rt.block_on(McpSession::aac(variant::aac_server(
            Variant::AacNoAudit,
            None,
        )?))?),
        "mcp-rmcp" | "mcp-rmcp-list" => Some(rt.block_on(McpSession::rmcp(StoredRouter::new()))?),
        _ => None,
    };
    let mut ok = 0;
    for i in 0..calls {
        let done = match (what.as_str(), &mut session) {
            ("aac", _) => rt.block_on(fx.aac_verified(&fx.aac_no_audit, i)),
            ("aac-audit", _) => rt.block_on(fx.aac_verified(&fx.aac_counting, i)),
            ("rmcp", _) => rt.block_on(fx.rmcp(&fx.rmcp_stored, i)),
            ("mcp-aac" | "mcp-rmcp", Some(session)) => rt.block_on(session.call(i)),
            ("mcp-aac-list" | "mcp-rmcp-list", Some(session)) => {
                rt.block_on(session.list()) == TOOL_COUNT
            }
            _ => return Err(usage()),
        };
        ok += usize::from(done);
    }
    eprintln!("{ok} of {calls} calls succeeded");
    Ok(())
}

/// `bench-all drive <a|n|b|c|d> <stdio|stdio-pipelined|http-N> <secs>`: start one server,
/// print its process id on stderr, wait a second (attach a profiler:
/// `perf record -g -p <pid>`), then load it for `secs` seconds with one scenario and
/// print the throughput.
fn drive(args: &[String]) -> io::Result<()> {
    let usage = || {
        io::Error::other(
            "usage: bench-all drive <a|n|b|m|c|d|p> <stdio|stdio-pipelined|http-N> <secs> \
             (p: AAC_BENCH_POSTGRES=postgres://user@host/db)",
        )
    };
    let variant = args
        .first()
        .and_then(|s| Variant::from_key(s))
        .ok_or_else(usage)?;
    let scenario = args.get(1).ok_or_else(usage)?.clone();
    let secs: f64 = args.get(2).and_then(|s| s.parse().ok()).ok_or_else(usage)?;
    let exe = std::env::current_exe()?;
    let dir = tempfile::tempdir()?;
    // (p): a fresh database on the server at `AAC_BENCH_POSTGRES`, dropped after.
    let pg_admin = std::env::var("AAC_BENCH_POSTGRES").ok();
    let pg_name = format!("aac_bench_drive_{}", std::process::id());
    let mut audit_db = variant.has_audit_db().then(|| dir.path().join("audit.db"));
    let plan = Plan {
        warmup_calls: std::env::var("AAC_BENCH_WARMUP")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(300),
        measure: Duration::from_secs_f64(secs),
        max_calls: 10_000_000,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if variant == Variant::AacPostgres {
        let admin = pg_admin.as_deref().ok_or_else(|| {
            io::Error::other("(p) needs AAC_BENCH_POSTGRES=postgres://user@host/db")
        })?;
        audit_db = Some(PathBuf::from(
            rt.block_on(postgres_audit::create(admin, &pg_name))?,
        ));
    }
    let driven = rt.block_on(async {
        let transport = if scenario.starts_with("http") {
            TransportKind::Http
        } else {
            TransportKind::Stdio
        };
        let mut server =
            ServerProcess::spawn(&exe, variant, transport, audit_db.as_deref()).await?;
        eprintln!("server pid {}", server.pid());
        let cpu_before = (cpu_time(server.pid()), cpu_time(0));
        let mut clients = 1;
        let result = match scenario.as_str() {
            "stdio" | "stdio-pipelined" => {
                let mut client = server.stdio_client().await?;
                tokio::time::sleep(Duration::from_secs(1)).await;
                if scenario == "stdio" {
                    client.sequential(plan).await?
                } else {
                    client.pipelined(plan, 32).await?
                }
            }
            http => {
                clients = http
                    .strip_prefix("http-")
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(usage)?;
                let addr = server.addr.ok_or_else(|| io::Error::other("no address"))?;
                tokio::time::sleep(Duration::from_secs(1)).await;
                http_run(addr, clients, plan).await?
            }
        };
        let mut latencies = result.latencies_ns.clone();
        latencies.sort_unstable();
        let p50 = latencies.get(latencies.len() / 2).copied().unwrap_or(0);
        println!(
            "{} {scenario}: {:.0} calls/s, p50 {:.1} µs, {} measured calls after {} warm-up calls per client",
            variant.key(),
            result.throughput(),
            p50 as f64 / 1000.0,
            result.calls,
            plan.warmup_calls,
        );
        // What each call cost the two processes in CPU time, warm-up included: with
        // both cores busy, what decides how two servers' throughputs compare.
        if let ((Some(server_then), Some(client_then)), Some(server_now), Some(client_now)) =
            (cpu_before, cpu_time(server.pid()), cpu_time(0))
        {
            let calls = (result.calls + plan.warmup_calls * clients as u64).max(1) as f64;
            let per_call = |d: Duration| d.as_secs_f64() * 1e6 / calls;
            println!(
                "CPU per call (user + system, warm-up included): server {:.1} µs, client {:.1} µs",
                per_call(server_now.saturating_sub(server_then)),
                per_call(client_now.saturating_sub(client_then)),
            );
        }
        if transport == TransportKind::Stdio {
            // Its client is gone: it ends by itself (and writes its sink's figures).
            server.finish(Duration::from_secs(60)).await;
        } else {
            server.terminate(Duration::from_secs(60)).await;
        }
        // A stdio server with a SQLite trail left its sink's figures when its client left.
        if let Some(db) = audit_db.as_deref().filter(|_| transport == TransportKind::Stdio)
            && let Ok((records, batches, busy_ns)) = variant::read_stats(db)
        {
            println!(
                "audit sink: {records} records in {batches} batches ({:.1} per batch), \
                 {:.1} µs writing per batch, {:.1} µs per record",
                records as f64 / batches.max(1) as f64,
                busy_ns as f64 / batches.max(1) as f64 / 1000.0,
                busy_ns as f64 / records.max(1) as f64 / 1000.0,
            );
        }
        Ok(())
    });
    if let (Variant::AacPostgres, Some(admin)) = (variant, &pg_admin) {
        rt.block_on(postgres_audit::drop(admin, &pg_name))?;
        if let Some(db) = &audit_db {
            let _ = std::fs::remove_file(variant::stats_file(db));
        }
    }
    driven
}

/// Median nanoseconds per call of `f` over 15 batches, each batch long enough to last
/// about 20 ms (so that slow operations do not take minutes).
fn time_per_call(mut f: impl FnMut(usize) -> bool) -> io::Result<f64> {
    const BATCHES: usize = 15;
    let failed = || io::Error::other("a benchmark call failed");
    // Warm up, and size the batches.
    let mut i = 0;
    let start = Instant::now();
    while i < 10 || (i < 2000 && start.elapsed() < Duration::from_millis(20)) {
        if !f(i) {
            return Err(failed());
        }
        i += 1;
    }
    let per_call = start.elapsed().as_nanos() as f64 / i as f64;
    let batch = ((20_000_000.0 / per_call) as usize).clamp(1, 20_000);
    let mut results = Vec::with_capacity(BATCHES);
    for _ in 0..BATCHES {
        let start = Instant::now();
        for _ in 0..batch {
            if !f(i) {
                return Err(failed());
            }
            i += 1;
        }
        results.push(start.elapsed().as_nanos() as f64 / batch as f64);
    }
    Ok(median(&results))
}

const MCP_CALL_BASELINE: &str = "`tools/call`, rmcp stored router";
const MCP_LIST_AAC: &str = "`tools/list` of 150, aac-tools";
const MCP_LIST_RMCP: &str = "`tools/list` of 150, rmcp stored router";

type Lines = Vec<PipelineLine>;

fn pipeline_section() -> io::Result<(Lines, Lines)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let fx = rt.block_on(async { Fixture::new() });
    let durable_dir = tempfile::tempdir()?;
    let durable = rt.block_on(async {
        variant::aac_server(
            Variant::AacDurable,
            Some(&durable_dir.path().join("audit.db")),
        )
    });
    let mut lines = Vec::new();
    let mut add = |what: &str, ns: f64| {
        eprintln!("  {what}: {}", report::format_ns(ns));
        lines.push(PipelineLine {
            what: what.to_owned(),
            ns,
        });
    };
    add("bare handler", time_per_call(|i| fx.bare(i))?);
    add(
        "aac-tools, audit off",
        time_per_call(|i| rt.block_on(fx.aac_verified(&fx.aac_no_audit, i)))?,
    );
    add(
        "aac-tools, audit record (null sink)",
        time_per_call(|i| rt.block_on(fx.aac_verified(&fx.aac_counting, i)))?,
    );
    add(
        "aac-tools, audit record, bearer verified per call",
        time_per_call(|i| rt.block_on(fx.aac_bearer(&fx.aac_counting, i)))?,
    );
    match &durable {
        Ok(server) => add(
            "aac-tools, durable SQLite audit",
            time_per_call(|i| rt.block_on(fx.aac_verified(server, i)))?,
        ),
        Err(err) => eprintln!("  (no durable audit line: {err})"),
    }
    add(
        "rmcp stored router",
        time_per_call(|i| rt.block_on(fx.rmcp(&fx.rmcp_stored, i)))?,
    );
    add(
        "rmcp router rebuilt per call",
        time_per_call(|i| rt.block_on(fx.rmcp(&fx.rmcp_per_call, i)))?,
    );
    add(
        "`tools/list` of 150, aac-tools `Server::list_tools_json`, serialized",
        time_per_call(|_| fx.aac_list() > 0)?,
    );
    add(MCP_LIST_RMCP, time_per_call(|_| fx.rmcp_stored_list() > 0)?);
    add(
        "`tools/list` of 150, rmcp router rebuilt",
        time_per_call(|_| fx.rmcp_per_call_list() > 0)?,
    );

    // The path the transports use: JSON-RPC in, the MCP handler, JSON-RPC out.
    let mut mcp_lines = Vec::new();
    let mut add = |what: &str, ns: f64| {
        eprintln!("  {what}: {}", report::format_ns(ns));
        mcp_lines.push(PipelineLine {
            what: what.to_owned(),
            ns,
        });
    };
    let no_audit = variant::aac_server(Variant::AacNoAudit, None)?;
    let mut aac = rt.block_on(McpSession::aac(no_audit))?;
    let mut stored = rt.block_on(McpSession::rmcp(StoredRouter::new()))?;
    let mut per_call = rt.block_on(McpSession::rmcp(PerCallRouter))?;
    add(
        "`tools/call`, aac-tools, audit off (token verified per call)",
        time_per_call(|i| rt.block_on(aac.call(i)))?,
    );
    add(
        MCP_CALL_BASELINE,
        time_per_call(|i| rt.block_on(stored.call(i)))?,
    );
    add(
        "`tools/call`, rmcp router rebuilt",
        time_per_call(|i| rt.block_on(per_call.call(i)))?,
    );
    add(
        MCP_LIST_AAC,
        time_per_call(|_| rt.block_on(aac.list()) == TOOL_COUNT)?,
    );
    add(
        MCP_LIST_RMCP,
        time_per_call(|_| rt.block_on(stored.list()) == TOOL_COUNT)?,
    );
    add(
        "`tools/list` of 150, rmcp router rebuilt",
        time_per_call(|_| rt.block_on(per_call.list()) == TOOL_COUNT)?,
    );
    Ok((lines, mcp_lines))
}

const SCENARIO_NAMES: [&str; 5] = [
    "stdio, sequential",
    "stdio, pipelined (32 in flight)",
    "HTTP, 1 client",
    "HTTP, 16 clients",
    "HTTP, 64 clients",
];

/// (b), (a-count), (a-normal) and (a) over stdio with one sequential client, in turn in
/// every round; each SQLite server's time spent writing per record; SQLite's own
/// transaction of one of its records; the disk's `fdatasync`. With `--postgres`, (p) as
/// well, its sink's append per record, and PostgreSQL's durable single-row commit from
/// this process, back to back and with the rest of a call between two.
fn attribution(options: &Options) -> io::Result<report::Attribution> {
    /// The rows of the batch probe: about what a batch holds over stdio with 32 calls in
    /// flight and the durable sink (9–11 records, `drive a stdio-pipelined`).
    const BATCH_ROWS: usize = 10;
    let exe = std::env::current_exe()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let dir = tempfile::tempdir()?;
    let mut order = vec![
        Variant::AacNoAudit,
        Variant::AacCounting,
        Variant::AacDurableNormal,
        Variant::AacDurable,
    ];
    if options.postgres.is_some() {
        order.push(Variant::AacPostgres);
    }
    let plan = Plan {
        warmup_calls: 300,
        measure: Duration::from_secs_f64(options.secs),
        max_calls: 10_000_000,
    };
    let mut at = report::Attribution::default();
    for round in 0..options.rounds {
        at.syncs
            .extend(aac_bench::durable::fdatasync_latencies(dir.path(), 200)?);
        let pg_name = format!("aac_bench_attribution_{}_{round}", std::process::id());
        for k in 0..order.len() {
            let variant = order[(round + k) % order.len()];
            let db = match (variant, &options.postgres) {
                (Variant::AacPostgres, Some(admin)) => Some(PathBuf::from(
                    rt.block_on(postgres_audit::create(admin, &pg_name))?,
                )),
                _ => variant.has_audit_db().then(|| {
                    dir.path()
                        .join(format!("attribution-{}-{round}.db", variant.key()))
                }),
            };
            let run = rt.block_on(async {
                let mut server =
                    ServerProcess::spawn(&exe, variant, TransportKind::Stdio, db.as_deref())
                        .await?;
                let mut client = server.stdio_client().await?;
                tokio::time::sleep(Duration::from_millis(200)).await;
                let run = client.sequential(plan).await?;
                // The server writes its sink's figures once its client is gone.
                drop(client);
                server.finish(Duration::from_secs(10)).await;
                Ok::<_, io::Error>(run)
            })?;
            let mut latencies = run.latencies_ns;
            latencies.sort_unstable();
            let p50 = aac_bench::stats::percentile(&latencies, 50.0);
            eprintln!("round {} · {}: p50 {p50} ns", round + 1, variant.label());
            at.p50.entry(variant).or_default().push(p50);
            if let Some(db) = &db {
                let stats = variant::read_stats(db);
                if variant == Variant::AacPostgres {
                    let _ = std::fs::remove_file(variant::stats_file(db));
                    if let Some(admin) = &options.postgres {
                        rt.block_on(postgres_audit::drop(admin, &pg_name))?;
                    }
                }
                let (records, _, busy_ns) = stats?;
                at.write
                    .entry(variant)
                    .or_default()
                    .push(busy_ns as f64 / records.max(1) as f64);
                if variant == Variant::AacDurableNormal {
                    for (rows, evict) in [(1, false), (1, true), (BATCH_ROWS, false)] {
                        let mut sqlite = aac_bench::durable::sqlite_commit_latencies(
                            db,
                            dir.path(),
                            1000,
                            rows,
                            evict,
                        )?;
                        sqlite.sort_unstable();
                        let p50 = aac_bench::stats::percentile(&sqlite, 50.0);
                        match (rows, evict) {
                            (1, false) => at.sqlite.push(p50),
                            (1, true) => at.sqlite_cold.push(p50),
                            _ => at.sqlite_batch.push(p50 / rows as u64),
                        }
                    }
                }
            }
        }
        if let Some(admin) = &options.postgres {
            // The floor, back to back, then with what the rest of a call takes between
            // two commits (this round's (b) p50), then the sink's own append spaced the
            // same way: the same work as inside the server, without the server around it.
            let rest = at
                .p50
                .get(&Variant::AacNoAudit)
                .and_then(|r| r.last())
                .map_or(Duration::ZERO, |&ns| Duration::from_nanos(ns));
            let name = format!("aac_bench_attribution_floor_{}", std::process::id());
            let (tight, spaced, appends, appends_tight) = rt.block_on(async {
                let url = postgres_audit::create(admin, &name).await?;
                let tight = postgres_audit::commit_latencies(&url, 500, Duration::ZERO).await;
                let spaced = postgres_audit::commit_latencies(&url, 500, rest).await;
                let appends = postgres_audit::append_latencies(&url, 500, rest).await;
                postgres_audit::drop(admin, &name).await?;
                let url = postgres_audit::create(admin, &name).await?;
                let appends_tight =
                    postgres_audit::append_latencies(&url, 500, Duration::ZERO).await;
                postgres_audit::drop(admin, &name).await?;
                Ok::<_, io::Error>((tight?, spaced?, appends?, appends_tight?))
            })?;
            for (mut latencies, into) in [
                (tight, &mut at.pg_floor),
                (spaced, &mut at.pg_floor_spaced),
                (appends, &mut at.pg_append_spaced),
                (appends_tight, &mut at.pg_append),
            ] {
                latencies.sort_unstable();
                into.push(aac_bench::stats::percentile(&latencies, 50.0));
            }
        }
    }
    Ok(at)
}

/// What [`end_to_end`] measured: the runs, each server's memory, the file system's
/// `fdatasync` latencies, and (with `--postgres`) PostgreSQL's durable single-row commits.
type Measured = (EndToEnd, BTreeMap<Variant, Memory>, Vec<u64>, Vec<u64>);

fn end_to_end(options: &Options) -> io::Result<Measured> {
    let exe = std::env::current_exe()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let dir = tempfile::tempdir()?;
    let measure = Duration::from_secs_f64(options.secs);
    let mut e2e = EndToEnd::default();
    let mut memory: BTreeMap<Variant, Memory> = BTreeMap::new();
    // What one flush costs on the file system the audit databases are on, measured in
    // every round (the disk's latency drifts too).
    let mut syncs = Vec::new();
    // With `--postgres`, what one durable commit costs on that server.
    let mut pg_commits = Vec::new();
    let variants = &options.variants;
    let n = variants.len();
    for round in 0..options.rounds {
        syncs.extend(aac_bench::durable::fdatasync_latencies(dir.path(), 200)?);
        if let Some(admin) = &options.postgres {
            let name = format!("aac_bench_commit_{}", std::process::id());
            pg_commits.extend(rt.block_on(async {
                let url = postgres_audit::create(admin, &name).await?;
                let latencies = postgres_audit::commit_latencies(&url, 200, Duration::ZERO).await;
                postgres_audit::drop(admin, &name).await?;
                latencies
            })?);
        }
        for k in 0..n {
            let variant = variants[(round + k) % n];
            let mem = memory.entry(variant).or_default();
            // A SQLite file, or for (p) a fresh PostgreSQL database (its name and URL).
            let pg_name = |t: &str| format!("aac_bench_{}_{round}_{t}", std::process::id());
            let db = |t: &str| -> io::Result<PathBuf> {
                match (variant, &options.postgres) {
                    (Variant::AacPostgres, Some(admin)) => Ok(PathBuf::from(
                        rt.block_on(postgres_audit::create(admin, &pg_name(t)))?,
                    )),
                    (Variant::AacPostgres, None) => {
                        Err(io::Error::other("(p) needs `--postgres URL`"))
                    }
                    _ => Ok(dir
                        .path()
                        .join(format!("audit-{}-{round}-{t}.db", variant.key()))),
                }
            };
            let audit_db = variant.has_audit_db().then(|| db("stdio")).transpose()?;
            let http_db = variant.has_audit_db().then(|| db("http")).transpose()?;
            eprintln!("round {} · {}", round + 1, variant.label());
            rt.block_on(async {
                // stdio: one process, one client.
                let mut server =
                    ServerProcess::spawn(&exe, variant, TransportKind::Stdio, audit_db.as_deref())
                        .await?;
                let mut client = server.stdio_client().await?;
                tokio::time::sleep(Duration::from_millis(200)).await;
                mem.stdio_idle = mem.stdio_idle.max(rss_kib(server.pid()).unwrap_or(0));
                let plan = Plan {
                    warmup_calls: 300,
                    measure,
                    max_calls: 10_000_000,
                };
                let r = client.sequential(plan).await?;
                eprintln!("  stdio sequential: {:.0} calls/s", r.throughput());
                e2e.runs.entry((0, variant)).or_default().push(r);
                let sampler = RssSampler::start(server.pid());
                let r = client.pipelined(plan, 32).await?;
                mem.stdio_load = mem.stdio_load.max(sampler.finish());
                eprintln!("  stdio pipelined: {:.0} calls/s", r.throughput());
                e2e.runs.entry((1, variant)).or_default().push(r);
                drop(client);
                server.stop().await;

                // HTTP: one process, 1, 16 then 64 clients.
                let audit_db = http_db;
                let server =
                    ServerProcess::spawn(&exe, variant, TransportKind::Http, audit_db.as_deref())
                        .await?;
                let addr = server.addr.ok_or_else(|| io::Error::other("no address"))?;
                tokio::time::sleep(Duration::from_millis(200)).await;
                mem.http_idle = mem.http_idle.max(rss_kib(server.pid()).unwrap_or(0));
                for (s, clients) in [(2, 1), (3, 16), (4, 64)] {
                    let plan = Plan {
                        warmup_calls: 50,
                        measure,
                        max_calls: 10_000_000,
                    };
                    let sampler = (clients == 64).then(|| RssSampler::start(server.pid()));
                    let r = http_run(addr, clients, plan).await?;
                    if let Some(sampler) = sampler {
                        mem.http_load = mem.http_load.max(sampler.finish());
                    }
                    if clients == 1 {
                        // Idle again, once both frameworks have served a client (rmcp
                        // builds its router for a session, not at start-up).
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        mem.http_served = mem.http_served.max(rss_kib(server.pid()).unwrap_or(0));
                    }
                    eprintln!("  HTTP {clients} clients: {:.0} calls/s", r.throughput());
                    e2e.runs.entry((s, variant)).or_default().push(r);
                }
                server.stop().await;
                Ok::<_, io::Error>(())
            })?;
            if let (Variant::AacPostgres, Some(admin)) = (variant, &options.postgres) {
                for t in ["stdio", "http"] {
                    rt.block_on(postgres_audit::drop(admin, &pg_name(t)))?;
                    // The stdio server's figures, which nothing here reads.
                    let url = postgres_audit::url_of(admin, &pg_name(t));
                    let _ = std::fs::remove_file(variant::stats_file(Path::new(&url)));
                }
            }
        }
    }
    Ok((e2e, memory, syncs, pg_commits))
}

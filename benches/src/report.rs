//! The Markdown report `bench-all` prints: the machine, then one table per part.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::compile::CompileTimes;
use crate::stats::{RunResult, median, percentile};
use crate::variant::Variant;

/// The machine the figures come from.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|r| r.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|r| r.trim().strip_suffix("kB"))
                .and_then(|r| r.trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    let rustc = std::process::Command::new("rustc")
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    format!("{cpu}, {cores} cores, {mem_gib:.0} GiB, Linux {kernel}, {rustc}")
}

/// One line of the pipeline table: nanoseconds per operation.
#[derive(Debug, Clone)]
pub struct PipelineLine {
    /// What was measured.
    pub what: String,
    /// Median nanoseconds per call over the batches.
    pub ns: f64,
}

/// The pipeline table: ratios to the line `baseline`, and, with a `floor`, the cost
/// over that line.
pub fn pipeline_table(
    out: &mut String,
    lines: &[PipelineLine],
    baseline: &str,
    floor: Option<&str>,
) {
    let base = lines.iter().find(|l| l.what == baseline).map(|l| l.ns);
    let bare = floor.and_then(|f| lines.iter().find(|l| l.what == f).map(|l| l.ns));
    match bare {
        Some(_) => {
            let _ = writeln!(
                out,
                "| in process, per call | median | over the bare handler | ratio to {baseline} |"
            );
            let _ = writeln!(out, "| --- | ---: | ---: | ---: |");
        }
        None => {
            let _ = writeln!(
                out,
                "| in process, per call | median | ratio to {baseline} |"
            );
            let _ = writeln!(out, "| --- | ---: | ---: |");
        }
    }
    for line in lines {
        let ratio = base.map_or(String::new(), |b| format!("{:.2}", line.ns / b));
        match bare {
            Some(b) => {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {ratio} |",
                    line.what,
                    format_ns(line.ns),
                    format_ns(line.ns - b)
                );
            }
            None => {
                let _ = writeln!(out, "| {} | {} | {ratio} |", line.what, format_ns(line.ns));
            }
        }
    }
}

/// Nanoseconds as µs with two decimals (or ns below 1 µs).
pub fn format_ns(ns: f64) -> String {
    if ns.abs() >= 1000.0 {
        format!("{:.2} µs", ns / 1000.0)
    } else {
        format!("{ns:.0} ns")
    }
}

/// Every run of every (scenario, variant), across rounds.
#[derive(Debug, Default)]
pub struct EndToEnd {
    /// Keyed by scenario index then variant, one result per round.
    pub runs: BTreeMap<(usize, Variant), Vec<RunResult>>,
}

impl EndToEnd {
    /// The median throughput of a (scenario, variant) over rounds.
    pub fn throughput(&self, scenario: usize, variant: Variant) -> Option<f64> {
        let runs = self.runs.get(&(scenario, variant))?;
        let t: Vec<f64> = runs.iter().map(RunResult::throughput).collect();
        Some(median(&t))
    }

    /// The median over rounds of the throughput ratio `a / b`, each ratio taken within
    /// one round (the two servers ran minutes apart at most).
    pub fn ratio(&self, scenario: usize, a: Variant, b: Variant) -> Option<f64> {
        let ra = self.runs.get(&(scenario, a))?;
        let rb = self.runs.get(&(scenario, b))?;
        let ratios: Vec<f64> = ra
            .iter()
            .zip(rb)
            .map(|(x, y)| x.throughput() / y.throughput())
            .collect();
        (!ratios.is_empty()).then(|| median(&ratios))
    }

    /// p50 and p99 latency in ns over every call of every round.
    pub fn latency(&self, scenario: usize, variant: Variant) -> Option<(u64, u64)> {
        let runs = self.runs.get(&(scenario, variant))?;
        let mut all: Vec<u64> = runs
            .iter()
            .flat_map(|r| r.latencies_ns.iter().copied())
            .collect();
        all.sort_unstable();
        Some((percentile(&all, 50.0), percentile(&all, 99.0)))
    }
}

/// The end-to-end table for the scenarios named.
pub fn end_to_end_table(
    out: &mut String,
    e2e: &EndToEnd,
    scenarios: &[&str],
    variants: &[Variant],
) {
    let _ = writeln!(
        out,
        "| scenario | server | calls/s (median) | p50 | p99 | ÷ (c) |"
    );
    let _ = writeln!(out, "| --- | --- | ---: | ---: | ---: | ---: |");
    for (s, name) in scenarios.iter().enumerate() {
        for &v in variants {
            let Some(tp) = e2e.throughput(s, v) else {
                continue;
            };
            let (p50, p99) = e2e.latency(s, v).unwrap_or((0, 0));
            let ratio = e2e
                .ratio(s, v, Variant::RmcpStored)
                .map_or(String::from("–"), |r| format!("{r:.2}"));
            let _ = writeln!(
                out,
                "| {name} | {} | {tp:.0} | {} | {} | {ratio} |",
                v.label(),
                format_ns(p50 as f64),
                format_ns(p99 as f64)
            );
        }
    }
}

/// The durability table: the disk's `fdatasync` latency, and for each scenario the
/// throughput of (a) and (a-normal) against (c) and against each other.
pub fn durability_table(out: &mut String, e2e: &EndToEnd, scenarios: &[&str], syncs: &[u64]) {
    let mut sorted = syncs.to_vec();
    sorted.sort_unstable();
    let _ = writeln!(
        out,
        "One `fdatasync` of a 4 KiB write on the file system of the audit databases, {} times \
         in this run: median {}, p99 {}.\n",
        sorted.len(),
        format_ns(percentile(&sorted, 50.0) as f64),
        format_ns(percentile(&sorted, 99.0) as f64)
    );
    let _ = writeln!(
        out,
        "| scenario | (a) ÷ (c) | (a-normal) ÷ (c) | (a) ÷ (a-normal) | (a-normal) ÷ (b) |"
    );
    let _ = writeln!(out, "| --- | ---: | ---: | ---: | ---: |");
    let ratio = |s: usize, a: Variant, b: Variant| {
        e2e.ratio(s, a, b)
            .map_or(String::from("–"), |r| format!("{r:.2}"))
    };
    for (s, name) in scenarios.iter().enumerate() {
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {} | {} |",
            ratio(s, Variant::AacDurable, Variant::RmcpStored),
            ratio(s, Variant::AacDurableNormal, Variant::RmcpStored),
            ratio(s, Variant::AacDurable, Variant::AacDurableNormal),
            ratio(s, Variant::AacDurableNormal, Variant::AacNoAudit),
        );
    }
}

/// One goal of the issue, met or not.
#[derive(Debug, Clone)]
pub struct Goal {
    /// What is compared.
    pub what: String,
    /// The measured figure.
    pub value: f64,
    /// The bound.
    pub bound: f64,
    /// Whether the figure must be at least (true) or at most (false) the bound.
    pub at_least: bool,
}

impl Goal {
    /// Whether the goal is met.
    pub fn met(&self) -> bool {
        if self.at_least {
            self.value >= self.bound
        } else {
            self.value <= self.bound
        }
    }
}

/// The end-to-end bounds of issue 20, each beside the figure it is about:
///
/// - a lone client (stdio sequential, HTTP 1 client): (a) p50 ≤ (b) p50 + the disk's
///   `fdatasync` p50 + 30 µs, and (a-normal) / (b) ≥ 0.9;
/// - concurrent callers (stdio pipelined, HTTP 16 and 64 clients): (a) / (b) ≥ 0.9;
/// - every scenario: (b) / (c) ≥ 1.0 (median of the ratios of each round);
/// - memory: idle ≤ 1.5 × rmcp's over stdio and HTTP, ≤ 1.2 × at 64 HTTP clients, for
///   (a) (the default, durable server) and (b).
pub fn end_to_end_goals(
    e2e: &EndToEnd,
    scenarios: &[&str],
    memory: &BTreeMap<Variant, Memory>,
    syncs: &[u64],
) -> Vec<Goal> {
    let mut goals = Vec::new();
    let mut sorted = syncs.to_vec();
    sorted.sort_unstable();
    let sync_p50 = percentile(&sorted, 50.0) as f64;
    let (a, n, b, c) = (
        Variant::AacDurable,
        Variant::AacDurableNormal,
        Variant::AacNoAudit,
        Variant::RmcpStored,
    );
    let ratio_goal = |goals: &mut Vec<Goal>, s: usize, x: Variant, y: Variant, bound: f64| {
        if let Some(r) = e2e.ratio(s, x, y) {
            goals.push(Goal {
                what: format!(
                    "{}: ({}) / ({}) throughput",
                    scenarios[s],
                    x.short(),
                    y.short()
                ),
                value: r,
                bound,
                at_least: true,
            });
        }
    };
    for (s, name) in scenarios.iter().enumerate() {
        // Scenario 0 (stdio sequential) and 2 (HTTP, 1 client) have one caller.
        let lone = s == 0 || s == 2;
        if lone {
            if let (Some((pa, _)), Some((pb, _))) = (e2e.latency(s, a), e2e.latency(s, b))
                && !sorted.is_empty()
            {
                goals.push(Goal {
                    what: format!(
                        "{name}: (a) p50 − (b) p50 − `fdatasync` p50 ({}), µs",
                        format_ns(sync_p50)
                    ),
                    value: (pa as f64 - pb as f64 - sync_p50) / 1000.0,
                    bound: 30.0,
                    at_least: false,
                });
            }
            ratio_goal(&mut goals, s, n, b, 0.9);
        } else {
            ratio_goal(&mut goals, s, a, b, 0.9);
        }
        ratio_goal(&mut goals, s, b, c, 1.0);
    }
    if let Some(rmcp) = memory.get(&c) {
        for v in [a, b] {
            let Some(m) = memory.get(&v) else { continue };
            for (what, ours, theirs, bound) in [
                ("stdio idle", m.stdio_idle, rmcp.stdio_idle, 1.5),
                ("HTTP idle", m.http_idle, rmcp.http_idle, 1.5),
                ("HTTP, 64 clients", m.http_load, rmcp.http_load, 1.2),
            ] {
                if theirs > 0 {
                    goals.push(Goal {
                        what: format!("resident set, {what}: ({}) / (c)", v.short()),
                        value: ours as f64 / theirs as f64,
                        bound,
                        at_least: false,
                    });
                }
            }
        }
    }
    goals
}

/// Issue 20's bounds for (p), the durable PostgreSQL audit, against (b): for a lone
/// client, (p) p50 ≤ (b) p50 + one durable commit's p50 + 30 µs; with 16 and 64 clients,
/// (p) / (b) ≥ 0.9. Nothing when (p) was not measured.
pub fn postgres_goals(e2e: &EndToEnd, scenarios: &[&str], commits: &[u64]) -> Vec<Goal> {
    let mut goals = Vec::new();
    let mut sorted = commits.to_vec();
    sorted.sort_unstable();
    if sorted.is_empty() {
        return goals;
    }
    let commit_p50 = percentile(&sorted, 50.0) as f64;
    let (p, b) = (Variant::AacPostgres, Variant::AacNoAudit);
    for (s, name) in scenarios.iter().enumerate() {
        let lone = s == 0 || s == 2;
        if lone {
            if let (Some((pp, _)), Some((pb, _))) = (e2e.latency(s, p), e2e.latency(s, b)) {
                goals.push(Goal {
                    what: format!(
                        "{name}: (p) p50 − (b) p50 − PostgreSQL commit p50 ({}), µs",
                        format_ns(commit_p50)
                    ),
                    value: (pp as f64 - pb as f64 - commit_p50) / 1000.0,
                    bound: 30.0,
                    at_least: false,
                });
            }
        } else if let Some(r) = e2e.ratio(s, p, b) {
            goals.push(Goal {
                what: format!("{name}: (p) / (b) throughput"),
                value: r,
                bound: 0.9,
                at_least: true,
            });
        }
    }
    goals
}

/// The goals table.
pub fn goals_table(out: &mut String, goals: &[Goal]) {
    let _ = writeln!(out, "| goal | measured | bound | met |");
    let _ = writeln!(out, "| --- | ---: | ---: | :---: |");
    for g in goals {
        let op = if g.at_least { "≥" } else { "≤" };
        let _ = writeln!(
            out,
            "| {} | {:.2} | {op} {} | {} |",
            g.what,
            g.value,
            g.bound,
            if g.met() { "yes" } else { "**no**" }
        );
    }
}

/// Resident sets of one server, KiB.
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    /// After start-up and one session over stdio.
    pub stdio_idle: u64,
    /// Largest seen during the pipelined stdio run.
    pub stdio_load: u64,
    /// Over HTTP after start-up, before any client.
    pub http_idle: u64,
    /// Over HTTP, idle again after the one-client run (its session still open): both
    /// frameworks have then built what they serve, where rmcp builds nothing before a
    /// session. Beside the bound, not one of it.
    pub http_served: u64,
    /// Largest seen during the 64-client HTTP run.
    pub http_load: u64,
}

/// The memory table.
pub fn memory_table(out: &mut String, memory: &BTreeMap<Variant, Memory>) {
    let _ = writeln!(
        out,
        "| server | stdio idle | stdio under load | HTTP idle | HTTP idle after one client | HTTP, 64 clients |"
    );
    let _ = writeln!(out, "| --- | ---: | ---: | ---: | ---: | ---: |");
    let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
    for (v, m) in memory {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            v.label(),
            mib(m.stdio_idle),
            mib(m.stdio_load),
            mib(m.http_idle),
            mib(m.http_served),
            mib(m.http_load)
        );
    }
}

/// The compile-time table.
pub fn compile_table(out: &mut String, times: &[CompileTimes]) {
    let _ = writeln!(
        out,
        "| 150-tool crate | clean build (median) | after a one-line edit (median) |"
    );
    let _ = writeln!(out, "| --- | ---: | ---: |");
    for t in times {
        let clean: Vec<f64> = t.clean.iter().map(|d| d.as_secs_f64()).collect();
        let edit: Vec<f64> = t.edit.iter().map(|d| d.as_secs_f64()).collect();
        let _ = writeln!(
            out,
            "| {} | {:.1} s | {:.1} s |",
            t.flavour.label(),
            median(&clean),
            median(&edit)
        );
    }
}

/// Where a lone client's audit time goes (stdio, one client, sequential calls): each
/// server's p50 per round, what its SQLite sink spent writing one record inside the
/// server ([`SinkStats::busy`](aac_tools::audit::SinkStats) per record), SQLite's own
/// transaction of the same row in a loop, and the disk's `fdatasync`.
#[derive(Debug, Default)]
pub struct Attribution {
    /// The p50 of each round, in nanoseconds, per server.
    pub p50: BTreeMap<Variant, Vec<u64>>,
    /// Nanoseconds the sink spent per record, per round, for the servers with a trail.
    pub write: BTreeMap<Variant, Vec<f64>>,
    /// The p50 of SQLite's own transaction of one record, per round, in nanoseconds.
    pub sqlite: Vec<u64>,
    /// The same with the CPU caches evicted before each transaction.
    pub sqlite_cold: Vec<u64>,
    /// SQLite's own transaction of ten such rows (a batch under load), per row, caches
    /// warm, in nanoseconds.
    pub sqlite_batch: Vec<u64>,
    /// `fdatasync` latencies of the same file system, in nanoseconds.
    pub syncs: Vec<u64>,
    /// With (p): the p50 of PostgreSQL's durable single-row commit from the bench
    /// process, back to back, per round, in nanoseconds.
    pub pg_floor: Vec<u64>,
    /// The same with (b)'s p50 between two commits (the rest of a lone client's call).
    pub pg_floor_spaced: Vec<u64>,
    /// The p50 of the PostgreSQL sink's append of one record from the bench process, back
    /// to back, per round, in nanoseconds.
    pub pg_append: Vec<u64>,
    /// The p50 of the PostgreSQL sink's append of one record from the bench process, with
    /// (b)'s p50 between two appends, per round, in nanoseconds.
    pub pg_append_spaced: Vec<u64>,
}

impl Attribution {
    fn p50(&self, v: Variant) -> Option<f64> {
        let rounds: Vec<f64> = self.p50.get(&v)?.iter().map(|&n| n as f64).collect();
        (!rounds.is_empty()).then(|| median(&rounds))
    }

    fn write(&self, v: Variant) -> Option<f64> {
        let rounds = self.write.get(&v)?;
        (!rounds.is_empty()).then(|| median(rounds))
    }

    fn sqlite(&self, cold: bool) -> Option<f64> {
        Self::median_of(if cold {
            &self.sqlite_cold
        } else {
            &self.sqlite
        })
    }

    fn median_of(rounds: &[u64]) -> Option<f64> {
        let rounds: Vec<f64> = rounds.iter().map(|&n| n as f64).collect();
        (!rounds.is_empty()).then(|| median(&rounds))
    }

    /// The best (a-normal) / (b) that one SQLite transaction per call allows, were
    /// everything else free: (b) / ((b) + SQLite's transaction in the server).
    pub fn normal_ceiling(&self) -> Option<f64> {
        let b = self.p50(Variant::AacNoAudit)?;
        let write = self.write(Variant::AacDurableNormal)?;
        Some(b / (b + write))
    }
}

/// The attribution table: a lone stdio client's p50, part by part.
pub fn attribution_table(out: &mut String, at: &Attribution) {
    let (a, n, m, b) = (
        Variant::AacDurable,
        Variant::AacDurableNormal,
        Variant::AacCounting,
        Variant::AacNoAudit,
    );
    let us = |x: Option<f64>| x.map_or(String::from("–"), |x| format!("{:.1}", x / 1000.0));
    let diff = |x: Variant, y: Variant| Some(at.p50(x)? - at.p50(y)?);
    let mut syncs = at.syncs.clone();
    syncs.sort_unstable();
    let sync = (!syncs.is_empty()).then(|| percentile(&syncs, 50.0) as f64);
    let _ = writeln!(
        out,
        "stdio, one client, sequential calls; {} rounds, each figure the median of the rounds' \
         p50 (µs).\n",
        at.p50.get(&b).map_or(0, Vec::len)
    );
    let _ = writeln!(out, "| part | µs | whose |");
    let _ = writeln!(out, "| --- | ---: | --- |");
    for (what, value, whose) in [
        ("(b) p50, audit off", at.p50(b), "—"),
        (
            "(a-count) − (b): building each record and handing it to a sink that keeps nothing",
            diff(m, b),
            "ours",
        ),
        (
            "(a-normal) − (a-count): the SQLite sink, `synchronous = NORMAL`",
            diff(n, m),
            "",
        ),
        (
            "· its write of one record inside the server (`SinkStats::busy` ÷ records): \
             transaction, chain hash, binding",
            at.write(n),
            "SQLite, but for one SHA-256 and the binding",
        ),
        (
            "· SQLite's own transaction of the same row, in a loop in the bench process, \
             caches warm",
            at.sqlite(false),
            "SQLite",
        ),
        (
            "· the same, with the CPU caches evicted before each transaction (as the rest \
             of a call does in a server)",
            at.sqlite(true),
            "SQLite",
        ),
        (
            "· SQLite's own transaction of ten such rows (a batch under load), per row, \
             caches warm",
            Attribution::median_of(&at.sqlite_batch),
            "SQLite",
        ),
        (
            "(a) − (a-normal): making the record durable",
            diff(a, n),
            "",
        ),
        (
            "· the sink's write and sync of one record inside the server",
            at.write(a),
            "SQLite and the disk",
        ),
        ("· one `fdatasync` of a 4 KiB write, p50", sync, "the disk"),
    ] {
        let _ = writeln!(out, "| {what} | {} | {whose} |", us(value));
    }
    let p = Variant::AacPostgres;
    if at.p50.contains_key(&p) {
        for (what, value, whose) in [
            (
                "(p) − (a-count): the durable PostgreSQL sink",
                diff(p, m),
                "",
            ),
            (
                "· its append of one record inside the server (`SinkStats::busy` ÷ records): \
                 one statement, one round trip, one commit",
                at.write(p),
                "PostgreSQL, but for the binding",
            ),
            (
                "· one durable single-row `INSERT` from the bench process, back to back, p50 \
                 (the bound's floor)",
                Attribution::median_of(&at.pg_floor),
                "PostgreSQL and the disk",
            ),
            (
                "· the same with (b)'s p50 spent between two commits, as a lone client's \
                 calls leave PostgreSQL's backend waiting",
                Attribution::median_of(&at.pg_floor_spaced),
                "PostgreSQL, the disk and the machine",
            ),
            (
                "· the sink's append of one record from the bench process, back to back, p50",
                Attribution::median_of(&at.pg_append),
                "PostgreSQL, but for the binding",
            ),
            (
                "· the sink's append of one record from the bench process, spaced the same \
                 way, p50",
                Attribution::median_of(&at.pg_append_spaced),
                "PostgreSQL, but for the binding",
            ),
            (
                "(p) − (a-count) − the sink's append inside the server: the rest",
                diff(p, m).zip(at.write(p)).map(|(d, w)| d - w),
                "",
            ),
        ] {
            let _ = writeln!(out, "| {what} | {} | {whose} |", us(value));
        }
    }
    if let Some(ceiling) = at.normal_ceiling() {
        let _ = writeln!(
            out,
            "\nWith one SQLite transaction per call costing what it costs inside the server, \
             (a-normal) / (b) could reach at most {ceiling:.2} for a lone client, were every \
             other part of the record free.\n"
        );
    }
}

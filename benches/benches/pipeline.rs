//! Micro-benchmarks of the pipeline alone, in process: `cargo bench -p aac-bench`.
//!
//! Every `call_*` benchmark calls the 150 tools in turn (a third read-only, a third
//! write, a third destructive with `confirm: true`), so each figure is the mean over
//! every kind of tool. `bare_handler` is the floor (the tool's own work without any
//! framework); the difference to it is what a framework costs per call.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use aac_bench::pipeline::Fixture;
use divan::Bencher;

fn main() {
    divan::main();
}

struct Shared {
    runtime: tokio::runtime::Runtime,
    fixture: Fixture,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let fixture = runtime.block_on(async { Fixture::new() });
        Shared { runtime, fixture }
    })
}

fn next() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// aac-tools `Server::call`, audit off, principal already verified (the HTTP path).
#[divan::bench]
fn call_aac_no_audit(bencher: Bencher<'_, '_>) {
    let s = shared();
    bencher.bench_local(|| {
        assert!(
            s.runtime
                .block_on(s.fixture.aac_verified(&s.fixture.aac_no_audit, next()))
        );
    });
}

/// aac-tools `Server::call`, audit record built and handed to a sink that keeps nothing.
#[divan::bench]
fn call_aac_audit_record(bencher: Bencher<'_, '_>) {
    let s = shared();
    bencher.bench_local(|| {
        assert!(
            s.runtime
                .block_on(s.fixture.aac_verified(&s.fixture.aac_counting, next()))
        );
    });
}

/// aac-tools `Server::call`, audit record, and the bearer token verified on each call
/// (the stdio path verifies once per session; this is the worst case).
#[divan::bench]
fn call_aac_bearer(bencher: Bencher<'_, '_>) {
    let s = shared();
    bencher.bench_local(|| {
        assert!(
            s.runtime
                .block_on(s.fixture.aac_bearer(&s.fixture.aac_counting, next()))
        );
    });
}

/// rmcp's generated `call_tool`, router stored (baseline (c)).
#[divan::bench]
fn call_rmcp_stored_router(bencher: Bencher<'_, '_>) {
    let s = shared();
    bencher.bench_local(|| {
        assert!(
            s.runtime
                .block_on(s.fixture.rmcp(&s.fixture.rmcp_stored, next()))
        );
    });
}

/// rmcp's generated `call_tool`, router rebuilt per call (baseline (d)).
#[divan::bench]
fn call_rmcp_per_call_router(bencher: Bencher<'_, '_>) {
    let s = shared();
    bencher.bench_local(|| {
        assert!(
            s.runtime
                .block_on(s.fixture.rmcp(&s.fixture.rmcp_per_call, next()))
        );
    });
}

/// The tool's own work, no framework: deserialize, run, serialize.
#[divan::bench]
fn bare_handler() {
    assert!(shared().fixture.bare(next()));
}

/// `tools/list` of 150 tools, serialized: aac-tools (built once at start-up).
#[divan::bench]
fn list_aac() -> usize {
    shared().fixture.aac_list()
}

/// `tools/list` of 150 tools, serialized: rmcp, stored router.
#[divan::bench]
fn list_rmcp_stored_router() -> usize {
    shared().fixture.rmcp_stored_list()
}

/// `tools/list` of 150 tools, serialized: rmcp, router rebuilt per call.
#[divan::bench]
fn list_rmcp_per_call_router() -> usize {
    shared().fixture.rmcp_per_call_list()
}

/// What checking a tool's output against its `outputSchema` adds to a call: the
/// validator (compiled as aac-tools compiles it, from the advertised schema) run on the
/// output of one of the bench tools, as the pipeline runs it before the answer is sent.
#[divan::bench]
fn output_check_alone(bencher: Bencher<'_, '_>) {
    let s = shared();
    let call = s.fixture.call(0);
    let registry = aac_bench::aac_flavour::registry().expect("the bench tools register");
    let schema = registry.get(&call.name).expect("the tool").json()["outputSchema"].clone();
    let validator = jsonschema::validator_for(&schema).expect("the output schema compiles");
    let mut arguments = call.arguments.clone();
    arguments.remove("confirm");
    let args: aac_bench::work::BenchArgs =
        serde_json::from_value(serde_json::Value::Object(arguments)).expect("the arguments");
    let output = serde_json::to_value(aac_bench::work::work("tool", args)).expect("the output");
    bencher.bench_local(|| assert!(validator.is_valid(divan::black_box(&output))));
}

//! `aac-host` against the reference server, `aacworkflow`, over stdio and Streamable HTTP:
//! a refused answer sends nothing (its audit trail, which records every `tools/call`
//! attempt, refused ones included, stays empty), a yes deletes.
//!
//! The `aacworkflow` binary is the one cargo built beside `aac-host` (`cargo test
//! --workspace` builds both; alone, run `cargo build -p aacworkflow` first).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

fn aacworkflow_bin() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_aac-host"))
        .with_file_name(format!("aacworkflow{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "the reference server is not built at `{}`: run `cargo build -p aacworkflow` \
         (or `cargo test --workspace`, which builds it)",
        bin.display()
    );
    bin
}

/// A seeded reference database in a temporary directory, and a token for alice (admin).
struct Reference {
    _dir: tempfile::TempDir,
    db: PathBuf,
    token: String,
}

impl Reference {
    fn new() -> Reference {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("aacworkflow.db");
        let reference = Reference {
            _dir: dir,
            db,
            token: String::new(),
        };
        let init = reference.aacworkflow(&["init", "--demo"]);
        assert!(init.status.success(), "{init:?}");
        let token = reference.aacworkflow(&[
            "token",
            "create",
            "--workspace",
            "demo",
            "--user",
            "alice",
            "--scopes",
            "all",
        ]);
        assert!(token.status.success(), "{token:?}");
        Reference {
            token: String::from_utf8(token.stdout).unwrap().trim().to_owned(),
            ..reference
        }
    }

    fn command(&self) -> Command {
        let mut command = Command::new(aacworkflow_bin());
        command
            .env("AAC_DB", &self.db)
            .env("AAC_LOG", "warn")
            .env_remove("AAC_TOKEN");
        command
    }

    fn aacworkflow(&self, args: &[&str]) -> Output {
        self.command().args(args).output().unwrap()
    }

    /// The audit records of `tool`, oldest first.
    fn audit(&self, tool: &str) -> Vec<Value> {
        let out = self.aacworkflow(&["audit", "--json", "--tool", tool]);
        assert!(out.status.success(), "{out:?}");
        let mut records: Vec<Value> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        records.sort_by_key(|r| r["timestamp"].as_str().unwrap_or("").to_owned());
        records
    }

    /// `aacworkflow serve --http 127.0.0.1:0`, killed on drop.
    fn serve_http(&self) -> HttpServer {
        self.serve_http_with(&[])
    }

    /// `aacworkflow serve --http 127.0.0.1:0` with more arguments, killed on drop.
    fn serve_http_with(&self, extra: &[&str]) -> HttpServer {
        let mut child = self
            .command()
            .args(["serve", "--http", "127.0.0.1:0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut server = HttpServer {
            child,
            url: String::new(),
        };
        let mut line = String::new();
        loop {
            line.clear();
            let n = stderr.read_line(&mut line).unwrap();
            assert!(n > 0, "aacworkflow exited before serving");
            if let Some(url) = line.trim().strip_prefix("aacworkflow: serving MCP on ") {
                server.url = url.to_owned();
                break;
            }
        }
        // Keep reading its stderr so that the server never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        server
    }
}

struct HttpServer {
    child: Child,
    url: String,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    /// What the person's terminal showed (a run on a terminal only).
    terminal: String,
}

fn host(args: &[&str], stdin: &str) -> Run {
    let args: Vec<&str> = ["--timeout", "60"]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    host_after(&args, stdin, std::time::Duration::ZERO)
}

/// `aac-host ARGS` with `stdin` piped in, in a session of its own without a terminal
/// (`setsid`: a test run from a terminal must not have the host ask on it).
fn host_after(args: &[&str], stdin: &str, delay: std::time::Duration) -> Run {
    use std::io::Write;
    let mut child = Command::new("setsid")
        .arg("--wait")
        .arg(env!("CARGO_BIN_EXE_aac-host"))
        .args(args)
        .env("AAC_LOG", "warn")
        .env_remove("AAC_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_owned();
    let typing = std::thread::spawn(move || {
        std::thread::sleep(delay);
        let _ = input.write_all(stdin.as_bytes());
    });
    let out = child.wait_with_output().unwrap();
    typing.join().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        terminal: String::new(),
    }
}

/// `aac-host ARGS` on a terminal of its own (util-linux `script`, a pseudo-terminal that
/// becomes its controlling terminal) at which its person types `typed` after `delay`;
/// its stdout and stderr go to files, as a shell would redirect them.
fn host_on_terminal(args: &[&str], typed: &str, delay: std::time::Duration) -> Run {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("stdout");
    let err = dir.path().join("stderr");
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let mut command = vec![
        quote(env!("CARGO_BIN_EXE_aac-host")),
        quote("--timeout"),
        quote("60"),
    ];
    command.extend(args.iter().map(|a| quote(a)));
    let command = format!(
        "{} >{} 2>{}",
        command.join(" "),
        quote(out.to_str().unwrap()),
        quote(err.to_str().unwrap())
    );
    let mut child = Command::new("script")
        .args(["--quiet", "--return", "--command", &command, "/dev/null"])
        .env("AAC_LOG", "warn")
        .env("SHELL", "/bin/sh")
        .env_remove("AAC_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let typed = typed.to_owned();
    let typing = std::thread::spawn(move || {
        std::thread::sleep(delay);
        let _ = input.write_all(typed.as_bytes());
        // The person stays at the terminal until the host is done.
        std::thread::sleep(std::time::Duration::from_secs(60));
        drop(input);
    });
    let shown = child.wait_with_output().unwrap();
    drop(typing);
    Run {
        code: shown.status.code().unwrap_or(-1),
        stdout: std::fs::read_to_string(&out).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err).unwrap_or_default(),
        terminal: String::from_utf8_lossy(&shown.stdout).into_owned(),
    }
}

/// The host's arguments to reach the server, after the tool and its arguments.
enum Via<'a> {
    Stdio,
    Http(&'a HttpServer),
}

fn call(reference: &Reference, via: &Via<'_>, tool: &str, arguments: &str, stdin: &str) -> Run {
    let bin = aacworkflow_bin();
    let bin = bin.to_str().unwrap();
    let db = reference.db.to_str().unwrap();
    let token = reference.token.as_str();
    match via {
        Via::Stdio => host(
            &[
                "--token", token, "--trust", tool, arguments, "--", bin, "--db", db, "serve",
            ],
            stdin,
        ),
        Via::Http(server) => host(
            &[
                "--url",
                &server.url,
                "--token",
                token,
                "--trust",
                tool,
                arguments,
            ],
            stdin,
        ),
    }
}

fn refuse_then_delete(reference: &Reference, via: Via<'_>) {
    let args = r#"{"issue_id":"AAC-1"}"#;

    // No: the question names the issue, and nothing reaches the server.
    let run = call(reference, &via, "delete_issue", args, "n\n");
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stderr.contains("Delete issue AAC-1? [y/N]"),
        "{}",
        run.stderr
    );
    assert!(
        reference.audit("delete_issue").is_empty(),
        "a refused answer must send no tools/call"
    );
    let run = call(reference, &via, "get_issue", args, "");
    assert_eq!(run.code, 0, "the issue is still there: {}", run.stderr);
    let issue: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(issue["key"], "AAC-1");

    // Yes: confirm: true is added, the guard lets it through, the issue is gone.
    let run = call(reference, &via, "delete_issue", args, "y\n");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let deleted: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(deleted["key"], "AAC-1");
    let records = reference.audit("delete_issue");
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["outcome"], "success");

    let run = call(reference, &via, "get_issue", args, "");
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("error: not_found"), "{}", run.stderr);
}

#[test]
fn over_stdio_a_refused_answer_sends_nothing_and_a_yes_deletes() {
    let reference = Reference::new();
    refuse_then_delete(&reference, Via::Stdio);
}

#[test]
fn over_http_a_refused_answer_sends_nothing_and_a_yes_deletes() {
    let reference = Reference::new();
    let server = reference.serve_http();
    refuse_then_delete(&reference, Via::Http(&server));
}

#[test]
fn a_refused_token_is_reported_and_nothing_is_called() {
    let reference = Reference::new();
    let server = reference.serve_http();
    let run = host(
        &[
            "--url",
            &server.url,
            "--token",
            "aac_not_a_real_token",
            "--trust",
            "--yes",
            "delete_issue",
            r#"{"issue_id":"AAC-1"}"#,
        ],
        "",
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("refused the token"), "{}", run.stderr);
    assert!(reference.audit("delete_issue").is_empty());
}

/// The stdio server's own logs stay off the host's terminal unless asked for: by default
/// they are discarded, `--verbose` shows them, `--server-log FILE` keeps them in a file.
#[test]
fn the_stdio_servers_logs_stay_out_of_the_prompt_unless_asked() {
    let reference = Reference::new();
    let bin = aacworkflow_bin();
    let db = reference.db.to_str().unwrap();
    let run = |extra: &[&str], token: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_aac-host"))
            .args(["--timeout", "60", "--token", token, "--trust"])
            .args(extra)
            .args(["get_issue", r#"{"issue_id":"AAC-1"}"#, "--"])
            .arg(&bin)
            .args(["--db", db, "serve"])
            // The server logs at info: "serving MCP on stdio", then one line per call.
            .env("AAC_LOG", "info")
            .env_remove("AAC_HOST_VERBOSE")
            .env_remove("AAC_TOKEN")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = run(&[], &reference.token);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("AAC-1"), "{stdout}");
    assert!(
        !stderr.contains("serving MCP on stdio"),
        "the server's log reached the host's terminal: {stderr}"
    );

    let (code, _, stderr) = run(&["--verbose"], &reference.token);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("serving MCP on stdio"), "{stderr}");

    let log = reference.db.with_file_name("server.log");
    let (code, _, stderr) = run(&["--server-log", log.to_str().unwrap()], &reference.token);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("serving MCP on stdio"), "{stderr}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("serving MCP on stdio"), "{logged}");

    // A server that cannot start says why in its own words, which were discarded: the
    // host says where to find them.
    let (code, _, stderr) = run(&[], "aac_000000000000_nope");
    assert_eq!(code, 2, "{stderr}");
    assert!(!stderr.contains("AAC_TOKEN is refused"), "{stderr}");
    assert!(stderr.contains("--verbose shows them"), "{stderr}");
    let (code, _, stderr) = run(&["-v"], "aac_000000000000_nope");
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("AAC_TOKEN is refused"), "{stderr}");
}

/// `serve --confirm user`: the server asks the person itself. The host does not ask first
/// (it would ask twice); it shows the server's question, built from the tool's message
/// with the issue filled in, and answers it from the terminal. A no is refused and
/// recorded (`user_declined`), a yes deletes, recorded as `confirmed_by: user`.
fn the_server_asks(reference: &Reference, via: &Via<'_>) {
    let bin = aacworkflow_bin();
    let bin = bin.to_str().unwrap();
    let db = reference.db.to_str().unwrap();
    let token = reference.token.as_str();
    // On the person's terminal (`on_terminal`), or with the answer piped to stdin.
    let run_as = |typed: &str, on_terminal: bool| {
        let run = |args: &[&str]| {
            if on_terminal {
                host_on_terminal(args, typed, std::time::Duration::ZERO)
            } else {
                host(args, typed)
            }
        };
        match via {
            Via::Stdio => run(&[
                "--token",
                token,
                "--trust",
                "delete_issue",
                r#"{"issue_id":"AAC-2"}"#,
                "--",
                bin,
                "--db",
                db,
                "serve",
                "--confirm",
                "user",
            ]),
            Via::Http(server) => run(&[
                "--url",
                &server.url,
                "--token",
                token,
                "--trust",
                "delete_issue",
                r#"{"issue_id":"AAC-2"}"#,
            ]),
        }
    };
    let run = |typed: &str| run_as(typed, true);
    let question = "the server asks: Delete issue AAC-2 with its comments and \
                    autopilot runs? This cannot be undone. [y/N]";

    // A yes piped to stdin (`echo y | aac-host …`, what a model with a shell would do)
    // is nobody's: without a terminal the question is dismissed (`cancel`), never
    // answered for a person, and the call refused.
    let piped = run_as("y\n", false);
    assert_eq!(piped.code, 1, "{}", piped.stderr);
    assert!(piped.stderr.contains("no terminal"), "{}", piped.stderr);
    assert!(
        piped.stderr.contains("the user dismissed the confirmation"),
        "{}",
        piped.stderr
    );
    let records = reference.audit("delete_issue");
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["reason"], "user_declined");

    // A no at the terminal is a decline, as a no to the host's own question (exit 3).
    let no = run("n\n");
    assert_eq!(no.code, 3, "{}", no.stderr);
    assert!(
        no.stderr.contains("declined: the server ran nothing"),
        "{}",
        no.stderr
    );
    assert!(
        no.stderr.contains("asks for your confirmation itself"),
        "{}",
        no.stderr
    );
    assert!(
        !no.stderr.contains("AAC-2? [y/N]"),
        "the host asked too: {}",
        no.stderr
    );
    assert!(no.terminal.contains(question), "{}", no.terminal);
    assert!(no.stderr.contains("user_declined"), "{}", no.stderr);
    let records = reference.audit("delete_issue");
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[1]["outcome"], "denied");
    assert_eq!(records[1]["reason"], "user_declined");

    let yes = run("y\n");
    assert_eq!(yes.code, 0, "{}", yes.stderr);
    assert!(yes.terminal.contains(question), "{}", yes.terminal);
    let deleted: Value = serde_json::from_str(&yes.stdout).unwrap();
    assert_eq!(deleted["key"], "AAC-2");
    let records = reference.audit("delete_issue");
    assert_eq!(records.len(), 3, "{records:?}");
    assert_eq!(records[2]["outcome"], "success");
    assert_eq!(records[2]["confirmed_by"], "user");

    // `--yes` is the script's yes, never the person's: with nobody at the terminal, the
    // server's question is declined, and nothing is recorded as a person's yes.
    let scripted = match via {
        Via::Stdio => host(
            &[
                "--token",
                token,
                "--trust",
                "--yes",
                "delete_issue",
                r#"{"issue_id":"AAC-3"}"#,
                "--",
                bin,
                "--db",
                db,
                "serve",
                "--confirm",
                "user",
            ],
            "",
        ),
        Via::Http(server) => host(
            &[
                "--url",
                &server.url,
                "--token",
                token,
                "--trust",
                "--yes",
                "delete_issue",
                r#"{"issue_id":"AAC-3"}"#,
            ],
            "",
        ),
    };
    assert_eq!(scripted.code, 1, "{}", scripted.stderr);
    assert!(
        scripted.stderr.contains("user_declined"),
        "{}",
        scripted.stderr
    );
    assert!(
        !scripted.stderr.contains("answered yes"),
        "{}",
        scripted.stderr
    );
    let records = reference.audit("delete_issue");
    assert_eq!(records.len(), 4, "{records:?}");
    assert_eq!(records[3]["reason"], "user_declined");
}

/// The host's `--timeout` is the server's time, not the person's: a person who answers the
/// server's question after it has passed is still heard, and the call is sent once.
#[test]
fn a_person_slower_than_the_host_timeout_is_still_heard() {
    let reference = Reference::new();
    let bin = aacworkflow_bin();
    let run = host_on_terminal(
        &[
            "--timeout",
            "1",
            "--token",
            reference.token.as_str(),
            "--trust",
            "delete_issue",
            r#"{"issue_id":"AAC-4"}"#,
            "--",
            bin.to_str().unwrap(),
            "--db",
            reference.db.to_str().unwrap(),
            "serve",
            "--confirm",
            "user",
        ],
        "y\n",
        std::time::Duration::from_millis(2500),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let deleted: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(deleted["key"], "AAC-4");
    let records = reference.audit("delete_issue");
    assert_eq!(records.len(), 1, "sent once: {records:?}");
    assert_eq!(records[0]["confirmed_by"], "user");
}

#[test]
fn over_stdio_the_server_asks_the_user_and_the_host_answers() {
    let reference = Reference::new();
    the_server_asks(&reference, &Via::Stdio);
}

#[test]
fn over_http_the_server_asks_the_user_and_the_host_answers() {
    let reference = Reference::new();
    let server = reference.serve_http_with(&["--confirm", "user"]);
    the_server_asks(&reference, &Via::Http(&server));
}

/// A call the token has no scope for: over Streamable HTTP the reference server answers
/// with a real 403 (`WWW-Authenticate: Bearer error="insufficient_scope", scope="…"`).
/// That is the server's answer, as the same refusal over stdio is: shown as
/// `error: insufficient_scope: …`, exit 1, sent once (one audit record), never retried
/// and never called a transport failure.
#[test]
fn over_http_a_missing_scope_is_a_refusal_sent_once() {
    let reference = Reference::new();
    let token = reference.aacworkflow(&[
        "token",
        "create",
        "--workspace",
        "demo",
        "--user",
        "alice",
        "--scopes",
        "issues:read,issues:write",
    ]);
    assert!(token.status.success(), "{token:?}");
    let token = String::from_utf8(token.stdout).unwrap().trim().to_owned();
    let server = reference.serve_http();
    let run = |extra: &[&str]| {
        let mut args = vec!["--url", server.url.as_str(), "--token", &token, "--trust"];
        args.extend(["--backoff", "1"]);
        args.extend(extra);
        host(&args, "")
    };

    let run_read = run(&["dashboard_usage_daily"]);
    assert_eq!(run_read.code, 1, "{}", run_read.stderr);
    assert!(
        run_read.stderr.contains("error: insufficient_scope: ")
            && run_read.stderr.contains("dashboard:read"),
        "{}",
        run_read.stderr
    );
    assert!(!run_read.stderr.contains("retrying"), "{}", run_read.stderr);
    assert!(!run_read.stderr.contains("rmcp"), "{}", run_read.stderr);
    assert_eq!(reference.audit("dashboard_usage_daily").len(), 1);

    let run_write = run(&["--yes", "trigger_autopilot", r#"{"issue_id":"AAC-1"}"#]);
    assert_eq!(run_write.code, 1, "{}", run_write.stderr);
    assert!(
        run_write.stderr.contains("error: insufficient_scope: "),
        "{}",
        run_write.stderr
    );
    assert!(
        !run_write.stderr.contains("may or may not"),
        "{}",
        run_write.stderr
    );
    let records = reference.audit("trigger_autopilot");
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["reason"], "insufficient_scope");
}

/// Without a token the host says how to give one, in one line.
#[test]
fn over_http_a_missing_token_says_how_to_give_one() {
    let reference = Reference::new();
    let server = reference.serve_http();
    let run = host(&["--url", &server.url, "--trust", "--list"], "");
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("--token") && run.stderr.contains("AAC_TOKEN"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("rmcp"), "{}", run.stderr);
}

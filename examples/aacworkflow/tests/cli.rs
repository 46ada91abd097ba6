//! The command line, as a user runs it: the real binary on real files, and on a real
//! PostgreSQL database where the backend under test is PostgreSQL (`AAC_TEST_BACKEND`,
//! see `common`). Tests of files as such (paths, corrupt or foreign files, signed
//! checkpoints of an SQLite trail) are SQLite's only and say so.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use aac_tools::sqlite::{Database, TokenStore};
use aac_tools::tokens::{TokenInfo, TokenIssuer};
use aac_tools::{Principal, TokenVerifier, ToolError};
use common::TestDb;

/// A working directory, and on the PostgreSQL pass a fresh database as `AAC_DB`: the
/// database every command of a test runs on (on SQLite, `./aacworkflow.db`, the default).
struct Target {
    dir: tempfile::TempDir,
    pg: Option<TestDb>,
}

impl Target {
    fn new() -> Target {
        Target {
            dir: tempfile::tempdir().unwrap(),
            pg: common::on_postgres().then(common::test_db),
        }
    }

    fn command(&self) -> Command {
        let mut command = aacworkflow(self.dir.path());
        if let Some(pg) = &self.pg {
            command
                .env("AAC_DB", &pg.url)
                .env("AAC_DB_ROLE_PREFIX", pg.roles.prefix());
        }
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command().args(args).output().expect("the binary runs")
    }

    fn count_issues(&self) -> i64 {
        match &self.pg {
            Some(pg) => common::pg_scalar(&pg.url, "SELECT count(*) FROM issues", &[]),
            None => count_issues(&self.dir.path().join("aacworkflow.db")),
        }
    }

    /// The token store's verdict on `token`, read afresh.
    fn verify(&self, token: &str) -> Result<Principal, ToolError> {
        match &self.pg {
            Some(pg) => common::block(async { pg_tokens(pg).verify(token).await }),
            None => {
                let db = Database::open(self.dir.path().join("aacworkflow.db")).unwrap();
                TokenStore::open(&db).unwrap().verify_blocking(token)
            }
        }
    }

    fn tokens(&self) -> Vec<TokenInfo> {
        match &self.pg {
            Some(pg) => common::block(async { TokenIssuer::list(&pg_tokens(pg)).await.unwrap() }),
            None => {
                let db = Database::open(self.dir.path().join("aacworkflow.db")).unwrap();
                TokenStore::open(&db).unwrap().list().unwrap()
            }
        }
    }
}

fn pg_tokens(pg: &TestDb) -> aac_tools::postgres::TokenStore {
    let db = aac_tools::postgres::Database::connect(&pg.url, pg.roles.clone()).unwrap();
    aac_tools::postgres::TokenStore::open(&db).unwrap()
}

/// A test of files as such: on the PostgreSQL pass it says so and returns.
fn sqlite_only(why: &str) -> bool {
    if common::on_postgres() {
        eprintln!("SQLite only ({why}): runs in the SQLite pass");
        return true;
    }
    false
}

fn aacworkflow(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_aacworkflow"));
    command
        .current_dir(dir)
        .env_remove("AAC_DB")
        .env_remove("AAC_TOKEN")
        .env("AAC_LOG", "warn");
    command
}

fn run(dir: &Path, args: &[&str]) -> Output {
    aacworkflow(dir)
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

/// The command failed with exactly one line on stderr, `error: …`, and no panic.
fn one_line_error(output: &Output) -> String {
    let err = stderr(output);
    assert_eq!(output.status.code(), Some(1), "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected, got: {err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    assert!(stdout(output).is_empty());
    lines[0].to_owned()
}

fn count_issues(path: &Path) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("SELECT count(*) FROM issues", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn init_twice_is_harmless_and_the_default_path_is_in_the_working_directory() {
    let target = Target::new();
    let first = target.run(&["init", "--demo"]);
    assert!(first.status.success(), "{}", stderr(&first));
    let path = target.dir.path().join("aacworkflow.db");
    assert_eq!(
        path.exists(),
        target.pg.is_none(),
        "the default database is ./aacworkflow.db, unless AAC_DB names PostgreSQL"
    );
    assert_eq!(target.count_issues(), 6);
    let second = target.run(&["init", "--demo"]);
    assert!(second.status.success(), "{}", stderr(&second));
    assert_eq!(target.count_issues(), 6, "seeding twice adds nothing");
    let plain = target.run(&["init"]);
    assert!(plain.status.success());
    let version = match target.pg {
        Some(_) => aacworkflow::store::POSTGRES_MIGRATIONS.len(),
        None => aacworkflow::store::SCHEMA_VERSION as usize,
    };
    assert!(
        stderr(&plain).contains(&format!("schema version {version}")),
        "{}",
        stderr(&plain)
    );
    assert_eq!(target.count_issues(), 6);
}

/// A database whose schema a newer `aacworkflow` wrote is refused by every command, in
/// one line, and left as it was.
#[test]
fn a_newer_schema_is_refused_in_one_line() {
    let target = Target::new();
    assert!(target.run(&["init", "--demo"]).status.success());
    // One version past what this build knows.
    let newer = match &target.pg {
        Some(pg) => {
            let newer = aacworkflow::store::POSTGRES_MIGRATIONS.len() as i32 + 1;
            let bumped: i64 = common::pg_scalar(
                &pg.url,
                "WITH u AS (UPDATE aac_schema SET version = $1 WHERE component = 'aacworkflow' RETURNING 1)
                 SELECT count(*) FROM u",
                &[&newer],
            );
            assert_eq!(bumped, 1);
            newer
        }
        None => {
            let newer = aacworkflow::store::SCHEMA_VERSION + 1;
            let conn =
                rusqlite::Connection::open(target.dir.path().join("aacworkflow.db")).unwrap();
            conn.pragma_update(None, "user_version", newer).unwrap();
            newer
        }
    };
    for args in [
        &["init"][..],
        &["token", "list"],
        &["audit", "--verify"],
        &["serve", "--http", "127.0.0.1:0"],
    ] {
        let line = one_line_error(&target.run(args));
        assert!(
            line.contains(&format!("version {newer}")),
            "{args:?}: {line}"
        );
        assert!(
            line.contains("newer") || line.contains("upgrade"),
            "{args:?}: {line}"
        );
    }
    assert_eq!(target.count_issues(), 6, "nothing changed");
}

/// A file of the version before (1: before the trail's `confirmed_by` and `kind`, its
/// triggers and seals, which a build of version 1 misread) is brought to this build's
/// version when opened to write, its data kept, so that a build of version 1 refuses it
/// as newer; a negative version, which no build writes, is refused.
#[test]
fn an_older_file_is_stamped_this_version_and_a_negative_one_refused() {
    if sqlite_only("PRAGMA user_version") {
        return;
    }
    let target = Target::new();
    assert!(target.run(&["init", "--demo"]).status.success());
    let path = target.dir.path().join("aacworkflow.db");
    let version = |path: &Path| -> i32 {
        rusqlite::Connection::open(path)
            .unwrap()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(version(&path), aacworkflow::store::SCHEMA_VERSION);
    const { assert!(aacworkflow::store::SCHEMA_VERSION > 1) };
    let set = |v: i32| {
        rusqlite::Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", v)
            .unwrap();
    };
    set(1);
    let listed = target.run(&["token", "list"]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    assert_eq!(version(&path), 1, "a reading command stamps nothing");
    assert!(target.run(&["init"]).status.success());
    assert_eq!(version(&path), aacworkflow::store::SCHEMA_VERSION);
    assert_eq!(target.count_issues(), 6);
    set(-1);
    let line = one_line_error(&target.run(&["init"]));
    assert!(
        line.contains("schema version -1, which no aacworkflow writes"),
        "{line}"
    );
}

#[test]
fn db_comes_from_the_flag_then_aac_db() {
    if sqlite_only("file paths") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let by_env = dir.path().join("env.db");
    let out = aacworkflow(dir.path())
        .env("AAC_DB", &by_env)
        .arg("init")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(by_env.exists());
    let by_flag = dir.path().join("flag.db");
    let out = aacworkflow(dir.path())
        .env("AAC_DB", &by_env)
        .args(["init", "--db"])
        .arg(&by_flag)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(by_flag.exists());
    assert!(!dir.path().join("aacworkflow.db").exists());
}

/// `--help` names `AAC_DB` but never shows its value: a PostgreSQL URL holds a password,
/// and help output is pasted into tickets and CI logs.
#[test]
fn help_never_shows_the_value_of_aac_db() {
    let dir = tempfile::tempdir().unwrap();
    let url = "postgres://postgres:S3cretPW@127.0.0.1:5432/nothing";
    for args in [&["--help"][..], &["audit", "--help"], &["serve", "--help"]] {
        let out = aacworkflow(dir.path())
            .env("AAC_DB", url)
            .args(args)
            .output()
            .unwrap();
        let help = stdout(&out);
        assert!(help.contains("AAC_DB"), "{args:?}: {help}");
        assert!(!help.contains("S3cretPW"), "{args:?}: {help}");
    }
}

#[test]
fn token_create_prints_the_token_alone_and_it_works_until_revoked() {
    let target = Target::new();
    assert!(target.run(&["init", "--demo"]).status.success());
    let out = target.run(&[
        "token",
        "create",
        "--workspace",
        "demo",
        "--user",
        "bob",
        "--scopes",
        "issues:read,comments:read",
        "--expires",
        "30d",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = stdout(&out);
    let token = printed.trim_end_matches('\n');
    assert_eq!(printed.lines().count(), 1, "the token alone: {printed:?}");
    assert!(token.starts_with("aac_") && !token.contains(' '), "{token}");

    let verify = |token: &str| target.verify(token);
    let principal = verify(token).unwrap();
    assert_eq!(principal.subject(), "bob");
    assert_eq!(principal.workspace(), Some("demo"));
    assert_eq!(
        principal.scopes().collect::<Vec<_>>(),
        ["comments:read", "issues:read"]
    );
    let info = target.tokens();
    let expires = info[0].expires_at.unwrap() - info[0].created_at;
    assert_eq!(expires, 30 * 86_400);

    let listed = target.run(&["token", "list"]);
    assert!(stdout(&listed).contains("bob@demo"));
    assert!(!stdout(&listed).contains(token), "never the secret");

    // The whole token with another secret (the right id) revokes nothing.
    let id = token["aac_".len()..].split_once('_').unwrap().0;
    let wrong = format!("aac_{id}_{}", "0".repeat(64));
    let line = one_line_error(&target.run(&["token", "revoke", &wrong]));
    assert!(line.contains("secret"), "{line}");
    assert_eq!(verify(token).unwrap().subject(), "bob", "still valid");

    let revoked = target.run(&["token", "revoke", token]);
    assert!(revoked.status.success(), "{}", stderr(&revoked));
    assert_eq!(verify(token).unwrap_err().reason(), "invalid_token");
    let again = target.run(&["token", "revoke", token]);
    assert!(one_line_error(&again).contains("no live token"));

    let all = target.run(&[
        "token",
        "create",
        "--workspace",
        "other",
        "--user",
        "oscar",
        "--scopes",
        "all",
    ]);
    assert!(all.status.success());
    let oscar = verify(stdout(&all).trim()).unwrap();
    assert_eq!(oscar.scopes().count(), 7);
}

#[test]
fn token_create_refuses_unknown_users_scopes_and_durations() {
    let target = Target::new();
    assert!(target.run(&["init", "--demo"]).status.success());
    let create = |workspace: &str, user: &str, scopes: &str, expires: Option<&str>| {
        let mut args = vec![
            "token",
            "create",
            "--workspace",
            workspace,
            "--user",
            user,
            "--scopes",
            scopes,
        ];
        if let Some(e) = expires {
            args.extend(["--expires", e]);
        }
        target.run(&args)
    };
    let line = one_line_error(&create("demo", "zed", "issues:read", None));
    assert!(line.contains("no user `zed` in workspace `demo`"), "{line}");
    // oscar exists, but not in `demo`.
    let line = one_line_error(&create("demo", "oscar", "issues:read", None));
    assert!(line.contains("no user `oscar`"), "{line}");
    let line = one_line_error(&create("demo", "bob", "issues:raed", None));
    assert!(line.contains("unknown scope `issues:raed`"), "{line}");
    // A typo beside `all` is reported, not swallowed by it.
    let line = one_line_error(&create("demo", "bob", "all,issues:raed", None));
    assert!(line.contains("unknown scope `issues:raed`"), "{line}");
    let line = one_line_error(&create("demo", "bob", "issues:read", Some("30x")));
    assert!(line.contains("30d"), "{line}");
}

#[test]
fn commands_on_a_missing_database_say_to_run_init() {
    if sqlite_only(
        "a missing file; on PostgreSQL the commands that write migrate the database it names",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let line = one_line_error(&run(dir.path(), &["token", "list"]));
    assert!(line.contains("aacworkflow init"), "{line}");
    let line = one_line_error(&run(dir.path(), &["audit"]));
    assert!(line.contains("aacworkflow init"), "{line}");
    assert!(
        !dir.path().join("aacworkflow.db").exists(),
        "nothing created"
    );
}

/// Every broken path gets one line that says what to do, and leaves the file as it was.
#[test]
fn bad_database_files_get_one_line_that_says_what_to_do() {
    if sqlite_only("corrupt, foreign and unreadable files") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let check = |path: &Path, expect: &str| {
        let before = std::fs::read(path).ok();
        for args in [&["init"][..], &["token", "list"], &["serve", "--demo"]] {
            let out = aacworkflow(dir.path())
                .args(args)
                .arg("--db")
                .arg(path)
                .output()
                .unwrap();
            let line = one_line_error(&out);
            assert!(line.contains(expect), "{args:?}: {line}");
            assert!(line.contains("--db") || line.contains("upgrade"), "{line}");
        }
        assert_eq!(std::fs::read(path).ok(), before, "the file is untouched");
    };

    let garbage = dir.path().join("notes.txt");
    std::fs::write(&garbage, "these are my notes, not a database\n".repeat(200)).unwrap();
    check(&garbage, "not an aacworkflow database");

    let foreign = dir.path().join("foreign.db");
    {
        let conn = rusqlite::Connection::open(&foreign).unwrap();
        conn.execute_batch("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL);")
            .unwrap();
    }
    check(&foreign, "another application");
    // Tables whose names only look like ours to `LIKE` (`_` any one character, case
    // ignored): another application's too.
    for (file, table) in [
        ("aachen.db", "aachen_invoices"),
        ("upper.db", "AACustomers"),
    ] {
        let foreign = dir.path().join(file);
        {
            let conn = rusqlite::Connection::open(&foreign).unwrap();
            conn.execute_batch(&format!("CREATE TABLE {table} (id INTEGER PRIMARY KEY);"))
                .unwrap();
        }
        check(&foreign, "another application");
    }

    let newer = dir.path().join("newer.db");
    assert!(
        aacworkflow(dir.path())
            .args(["init", "--db"])
            .arg(&newer)
            .output()
            .unwrap()
            .status
            .success()
    );
    {
        let conn = rusqlite::Connection::open(&newer).unwrap();
        conn.pragma_update(None, "user_version", 99).unwrap();
        conn.pragma_update(None, "journal_mode", "DELETE").unwrap();
    }
    check(&newer, "schema version 99");

    // A real aacworkflow database whose pages past the header are damaged.
    let corrupt = dir.path().join("corrupt.db");
    assert!(
        aacworkflow(dir.path())
            .args(["init", "--demo", "--db"])
            .arg(&corrupt)
            .output()
            .unwrap()
            .status
            .success()
    );
    {
        let conn = rusqlite::Connection::open(&corrupt).unwrap();
        conn.pragma_update(None, "journal_mode", "DELETE").unwrap();
    }
    let mut bytes = std::fs::read(&corrupt).unwrap();
    assert!(
        bytes.len() > 6 * 4096,
        "the demo database spans several pages"
    );
    bytes[2 * 4096..5 * 4096].fill(0xff);
    std::fs::write(&corrupt, &bytes).unwrap();
    check(&corrupt, "not an aacworkflow database");

    check(dir.path(), "is a directory");

    let nowhere: PathBuf = dir.path().join("no/such/dir/aacworkflow.db");
    let out = aacworkflow(dir.path())
        .args(["init", "--db"])
        .arg(&nowhere)
        .output()
        .unwrap();
    let line = one_line_error(&out);
    assert!(line.contains("does not exist"), "{line}");
}

#[cfg(target_os = "linux")]
#[test]
fn an_unwritable_path_gets_one_line_that_says_what_to_do() {
    if sqlite_only("file paths") {
        return;
    }
    // /proc refuses new files even to root, so this holds whoever runs the tests.
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), &["init", "--db", "/proc/aacworkflow.db"]);
    let line = one_line_error(&out);
    assert!(
        line.contains("cannot write to `/proc/aacworkflow.db`"),
        "{line}"
    );
    assert!(line.contains("writable"), "{line}");
}

/// A database another process holds locked is said to be locked, not a matter of the
/// file's permissions: what to do is wait, not `chmod`.
#[test]
fn a_database_locked_by_another_process_is_said_to_be_locked() {
    if sqlite_only("a file lock") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let init = run(dir.path(), &["init"]);
    assert!(init.status.success(), "{}", stderr(&init));
    let holder = rusqlite::Connection::open(dir.path().join("aacworkflow.db")).unwrap();
    // Exclusive locking, then a write: the lock stays until the connection closes, and
    // shuts out readers too.
    holder
        .execute_batch("PRAGMA locking_mode = EXCLUSIVE; BEGIN IMMEDIATE; COMMIT;")
        .unwrap();
    let line = one_line_error(&run(dir.path(), &["audit"]));
    assert!(line.contains("locked"), "{line}");
    assert!(line.contains("another process holds it"), "{line}");
    assert!(!line.contains("permissions"), "{line}");
}

/// A FIFO, a socket or a device as `--db` is refused by every command, the reading ones
/// included, in one line and at once: the open that checked whether a file is ours waited
/// for ever on a FIFO (`init`, `audit`, `token list` and `serve` hung), and a device was
/// "no aacworkflow schema yet" to `audit` while `init` refused it.
#[cfg(unix)]
#[test]
fn a_fifo_a_socket_or_a_device_as_the_database_is_refused_by_every_command() {
    if sqlite_only("file paths") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let socket = dir.path().join("socket");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let commands: [&[&str]; 8] = [
        &["init"],
        &["audit"],
        &["audit", "--verify"],
        &["token", "list"],
        &[
            "token",
            "create",
            "--workspace",
            "demo",
            "--user",
            "alice",
            "--scopes",
            "all",
        ],
        &["token", "revoke", "000000000000"],
        &["serve"],
        &["serve", "--demo"],
    ];
    for path in [fifo.as_path(), &socket, Path::new("/dev/null")] {
        for args in commands {
            let mut child = aacworkflow(dir.path())
                .arg("--db")
                .arg(path)
                .args(args)
                .env("AAC_TOKEN", "aac_000000000000_nope")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            assert!(
                exited_within_30_s(&mut child).is_some(),
                "{path:?} {args:?}: hung"
            );
            let out = child.wait_with_output().unwrap();
            let line = one_line_error(&out);
            assert!(
                line.contains(&format!(
                    "`{}` is not a regular file (a FIFO, a socket or a device)",
                    path.display()
                )),
                "{path:?} {args:?}: {line}"
            );
        }
    }
}

#[test]
fn serve_on_stdio_needs_a_token_and_checks_it_at_start() {
    let target = Target::new();
    assert!(target.run(&["init", "--demo"]).status.success());
    let out = target.run(&["serve"]);
    let line = one_line_error(&out);
    assert!(line.contains("AAC_TOKEN"), "{line}");
    let out = target
        .command()
        .arg("serve")
        .env("AAC_TOKEN", "aac_000000000000_nope")
        .output()
        .unwrap();
    let line = one_line_error(&out);
    assert!(line.contains("AAC_TOKEN is refused"), "{line}");
    // A header's value rather than the token: the one thing to change is said.
    let out = target
        .command()
        .arg("serve")
        .env("AAC_TOKEN", "Bearer aac_000000000000_nope")
        .output()
        .unwrap();
    let line = one_line_error(&out);
    assert!(line.contains("without `Bearer `"), "{line}");
    let out = target.run(&["serve", "--stateless"]);
    assert_eq!(out.status.code(), Some(2), "clap: --stateless needs --http");
}

/// `serve --checkpoints` signs the chain's head (at start and when it stops) with the key
/// from `AAC_CHECKPOINT_KEY`; `audit --verify --checkpoints --public-key` checks them, and
/// fails once the table was cut behind a checkpoint.
#[test]
fn signed_checkpoints_from_serve_to_audit_verify() {
    if sqlite_only("signed checkpoints are for SQLite trails") {
        return;
    }
    use std::io::Write;
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    assert!(run(dir.path(), &["init", "--demo"]).status.success());
    let key = run(dir.path(), &["audit", "--new-checkpoint-key"]);
    assert!(key.status.success(), "{}", stderr(&key));
    let secret = stdout(&key).trim().to_owned();
    assert_eq!(secret.len(), 64, "{secret}");
    let public = stderr(&key)
        .split("--public-key ")
        .nth(1)
        .unwrap()
        .trim()
        .to_owned();
    assert_eq!(public.len(), 64, "{public}");
    let token = run(
        dir.path(),
        &[
            "token",
            "create",
            "--workspace",
            "demo",
            "--user",
            "alice",
            "--scopes",
            "all",
        ],
    );
    let token = stdout(&token).trim().to_owned();

    // Without the key, serve refuses to start.
    let out = run(dir.path(), &["serve", "--checkpoints", "cp.jsonl"]);
    assert!(one_line_error(&out).contains("AAC_CHECKPOINT_KEY"));

    // One stdio session with two calls; stdin closes, the server stops and signs.
    let mut child = aacworkflow(dir.path())
        .args(["serve", "--checkpoints", "cp.jsonl"])
        .env("AAC_TOKEN", &token)
        .env("AAC_CHECKPOINT_KEY", &secret)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for line in [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"get_issue","arguments":{"issue_id":"AAC-1"}}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"delete_issue","arguments":{"issue_id":"AAC-1"}}}"#,
    ] {
        writeln!(stdin, "{line}").unwrap();
    }
    // Wait for the answers before closing stdin.
    let mut stdout_pipe = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut answers = 0;
    let mut line = String::new();
    while answers < 3 {
        line.clear();
        if std::io::BufRead::read_line(&mut stdout_pipe, &mut line).unwrap() == 0 {
            break;
        }
        answers += usize::from(line.contains("\"id\":"));
    }
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success());
    let file = std::fs::read_to_string(dir.path().join("cp.jsonl")).unwrap();
    let last: serde_json::Value = serde_json::from_str(file.lines().last().unwrap()).unwrap();
    assert_eq!(last["seq"], 2, "the head after both calls: {file}");

    let verify = |public: &str| {
        run(
            dir.path(),
            &[
                "audit",
                "--verify",
                "--checkpoints",
                "cp.jsonl",
                "--public-key",
                public,
            ],
        )
    };
    let ok = verify(&public);
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert!(
        stdout(&ok).contains("checkpoints intact"),
        "{}",
        stdout(&ok)
    );

    // Cut the newest record (as a writer of the file could), and put the trigger back:
    // the chain still verifies, the checkpoints do not.
    let conn = rusqlite::Connection::open(dir.path().join("aacworkflow.db")).unwrap();
    let trigger: String = conn
        .query_row(
            "SELECT sql FROM sqlite_master WHERE name = 'aac_audit_no_delete'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    conn.execute_batch("DROP TRIGGER aac_audit_no_delete; DELETE FROM aac_audit WHERE seq = 2")
        .unwrap();
    conn.execute_batch(&trigger).unwrap();
    drop(conn);
    let chain = run(dir.path(), &["audit", "--verify"]);
    assert!(chain.status.success(), "{}", stderr(&chain));
    let cut = verify(&public);
    assert_eq!(cut.status.code(), Some(1));
    assert!(stderr(&cut).contains("truncated"), "{}", stderr(&cut));
}

/// `sql` on the SQLite file at `path`, as anyone who can write the file could run it.
fn tamper(path: &Path, sql: &str) {
    rusqlite::Connection::open(path)
        .unwrap()
        .execute_batch(sql)
        .unwrap();
}

/// The tables and triggers in the file at `path`, sorted.
fn schema_names(path: &Path) -> Vec<String> {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger') ORDER BY name")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Every command that only reads (`audit` in each form, `token list`) on a file that is
/// the application's but was never migrated: each fails in one line, and the file is
/// left exactly as it was (no table created, no migration).
#[test]
fn reading_commands_create_and_migrate_nothing() {
    if sqlite_only("the bytes of a file") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("aacworkflow.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.pragma_update(None, "application_id", aacworkflow::store::APPLICATION_ID)
            .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    for args in [
        &["audit", "--verify"][..],
        &["audit"],
        &["audit", "--json"],
        &["audit", "--stats"],
        &["token", "list"],
    ] {
        let line = one_line_error(&run(dir.path(), args));
        if args[0] == "audit" {
            assert!(line.contains("`aac_audit`"), "{args:?}: {line}");
            assert!(line.contains("renamed"), "{args:?}: {line}");
        }
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the file is untouched"
    );
    assert!(schema_names(&path).is_empty(), "{:?}", schema_names(&path));
}

impl Target {
    /// `sql` on the database, as its owner (anyone who can write the file, on SQLite).
    fn tamper(&self, sql: &str) {
        match &self.pg {
            Some(pg) => common::block(async {
                let (client, connection) = aac_tools::postgres::tokio_postgres::connect(
                    &pg.url,
                    aac_tools::postgres::tokio_postgres::NoTls,
                )
                .await
                .unwrap();
                tokio::spawn(connection);
                client.batch_execute(sql).await.unwrap();
            }),
            None => tamper(&self.dir.path().join("aacworkflow.db"), sql),
        }
    }

    fn has_table(&self, name: &str) -> bool {
        match &self.pg {
            Some(pg) => {
                let n: i64 = common::pg_scalar(
                    &pg.url,
                    "SELECT count(*) FROM information_schema.tables WHERE table_name = $1",
                    &[&name],
                );
                n > 0
            }
            None => schema_names(&self.dir.path().join("aacworkflow.db"))
                .iter()
                .any(|n| n == name),
        }
    }
}

/// A database the command line created has its trail from the start, so a trail that
/// is gone (renamed or dropped, which the triggers do not stop) is reported as such,
/// not verified as an empty chain, and not recreated by the reading commands.
#[test]
fn a_renamed_or_dropped_audit_table_is_reported_not_recreated() {
    let target = Target::new();
    assert!(target.run(&["init", "--demo"]).status.success());
    assert!(target.has_table("aac_audit"), "init creates the trail");
    if target.pg.is_none() {
        let names = schema_names(&target.dir.path().join("aacworkflow.db"));
        for name in ["aac_audit_no_delete", "aac_audit_no_update"] {
            assert!(
                names.iter().any(|n| n == name),
                "init creates {name}: {names:?}"
            );
        }
    }
    target.tamper("ALTER TABLE aac_audit RENAME TO evidence");
    for args in [
        &["audit", "--verify"][..],
        &["audit"],
        &["audit", "--stats"],
        &["token", "list"],
    ] {
        let out = target.run(args);
        if args[0] == "token" {
            assert!(out.status.success(), "{args:?}: {}", stderr(&out));
            continue;
        }
        let line = one_line_error(&out);
        assert!(
            line.contains("no `aac_audit` table") && line.contains("renamed"),
            "{args:?}: {line}"
        );
    }
    assert!(!target.has_table("aac_audit"), "not recreated");
    assert!(target.has_table("evidence"));
    // (On PostgreSQL the reference server's view `aacworkflow_usage` goes with it.)
    let cascade = if target.pg.is_some() { " CASCADE" } else { "" };
    target.tamper(&format!("DROP TABLE evidence{cascade}"));
    let line = one_line_error(&target.run(&["audit", "--verify"]));
    assert!(line.contains("dropped"), "{line}");
}

/// An `aac_audit` of other columns fails every audit command (and `init`) with the
/// message `serve` gives, instead of verifying as an intact chain.
#[test]
fn an_audit_table_with_other_columns_fails_every_audit_command() {
    let target = Target::new();
    assert!(target.run(&["init"]).status.success());
    let cascade = if target.pg.is_some() { " CASCADE" } else { "" };
    target.tamper(&format!(
        "DROP TABLE aac_audit{cascade}; CREATE TABLE aac_audit (seq BIGINT PRIMARY KEY, note TEXT)"
    ));
    for args in [
        &["audit"][..],
        &["audit", "--json"],
        &["audit", "--stats"],
        &["audit", "--verify"],
        &["init"],
        &["serve", "--http", "127.0.0.1:0"],
    ] {
        let line = one_line_error(&target.run(args));
        assert!(
            line.contains("`aac_audit` table has columns (seq, note)"),
            "{args:?}: {line}"
        );
    }
}

/// `--verify` reports append-only triggers that are gone or replaced by ones that
/// refuse nothing, and fails.
#[test]
fn verify_reports_missing_append_only_triggers() {
    if sqlite_only("tampering with the file") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("aacworkflow.db");
    assert!(run(dir.path(), &["init"]).status.success());
    let ok = run(dir.path(), &["audit", "--verify"]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    tamper(
        &path,
        "DROP TRIGGER aac_audit_no_update; DROP TRIGGER aac_audit_no_delete;
         CREATE TRIGGER aac_audit_no_delete BEFORE DELETE ON aac_audit WHEN 0 BEGIN SELECT 1; END;",
    );
    let out = run(dir.path(), &["audit", "--verify"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("aac_audit_no_update"),
        "{}",
        stdout(&out)
    );
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: ") && err.contains("aac_audit_no_update, aac_audit_no_delete"),
        "{err}"
    );
    let json = run(dir.path(), &["audit", "--verify", "--json"]);
    assert_eq!(json.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_str(&stdout(&json)).unwrap();
    assert_eq!(
        report["missing_triggers"],
        serde_json::json!(["aac_audit_no_update", "aac_audit_no_delete"])
    );
    assert_eq!(report["broken"], serde_json::Value::Null);
}

/// `n` calls without a token, each refused and recorded in the file's trail.
fn record_refused_calls(path: &Path, n: usize) {
    common::block(async {
        let db = aacworkflow::store::open(path, aacworkflow::store::OpenMode::Existing).unwrap();
        let sink = aac_tools::audit::SqliteSink::open(path).unwrap();
        let server = aacworkflow::server(&db, sink, false).unwrap();
        for _ in 0..n {
            server
                .call(aac_tools::CallRequest::new("get_issue", None))
                .await;
        }
    });
}

/// A cell of the wrong type (which only an edit of the file can put there) is a broken
/// record to `--verify`, named by its seq and column, where it failed with a bare SQL
/// error; the listing shows the row as stored and warns on stderr, naming the record and
/// column (it stopped there, and the append-only table could never be cleaned of it).
#[test]
fn a_wrong_typed_cell_is_a_broken_record_named_by_seq_and_column() {
    if sqlite_only("tampering with the file") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("aacworkflow.db");
    assert!(run(dir.path(), &["init"]).status.success());
    record_refused_calls(&path, 3);
    assert!(run(dir.path(), &["audit", "--verify"]).status.success());
    tamper(
        &path,
        "DROP TRIGGER aac_audit_no_update; DROP TRIGGER aac_audit_no_delete",
    );
    for (edit, column) in [
        ("status = 'abc'", "status"),
        ("status = x'00ff'", "status"),
        ("duration_us = 1.5", "duration_us"),
        ("tool = x'41'", "tool"),
    ] {
        let original: (i64, i64, String) = rusqlite::Connection::open(&path)
            .unwrap()
            .query_row(
                "SELECT status, duration_us, tool FROM aac_audit WHERE seq = 2",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        tamper(&path, &format!("UPDATE aac_audit SET {edit} WHERE seq = 2"));
        let out = run(dir.path(), &["audit", "--verify"]);
        assert_eq!(out.status.code(), Some(1), "{edit}: {}", stderr(&out));
        let report = stdout(&out);
        assert!(
            report.starts_with("chain broken: record 2: ")
                && report.contains(&format!("`{column}`")),
            "{edit}: {report}"
        );
        let err = stderr(&out);
        assert!(err.contains("broken at record 2"), "{edit}: {err}");
        let json = run(dir.path(), &["audit", "--verify", "--json"]);
        let json: serde_json::Value = serde_json::from_str(&stdout(&json)).unwrap();
        assert_eq!(json["broken"]["seq"], 2, "{edit}: {json}");
        let listed = run(dir.path(), &["audit"]);
        assert!(listed.status.success(), "{edit}: {}", stderr(&listed));
        assert_eq!(
            stdout(&listed).lines().count(),
            4,
            "{edit}: {}",
            stdout(&listed)
        );
        let line = stderr(&listed);
        assert!(
            line.lines().count() == 1
                && line.starts_with("warning: audit record 2")
                && line.contains(&format!("`{column}`")),
            "{edit}: {line}"
        );
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(
            "UPDATE aac_audit SET status = ?1, duration_us = ?2, tool = ?3 WHERE seq = 2",
            rusqlite::params![original.0, original.1, original.2],
        )
        .unwrap();
    }
    let out = run(dir.path(), &["audit", "--verify"]);
    assert!(
        stdout(&out).contains("chain intact: 3 records"),
        "{}",
        stdout(&out)
    );
}

/// Every command that prints on stdout, into a pipe nobody reads (`… | head -c0`): one
/// line, `error: cannot write the output: …`, exit 1, never a panic.
#[test]
fn a_closed_stdout_is_an_error_never_a_panic() {
    let target = Target::new();
    assert!(target.run(&["init", "--demo"]).status.success());
    let create = [
        "token",
        "create",
        "--workspace",
        "demo",
        "--user",
        "bob",
        "--scopes",
        "issues:read",
    ];
    assert!(target.run(&create).status.success());
    let mut commands = vec![&["token", "list"][..], &create, &["manifest"], &["audit"]];
    if target.pg.is_none() {
        commands.push(&["audit", "--new-checkpoint-key"]);
    }
    for args in commands {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = target.command().args(args).stdout(writer).output().unwrap();
        let err = stderr(&out);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        let last = err.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("error: cannot write the output: Broken pipe"),
            "{args:?}: {err}"
        );
    }
}

/// Flags that contradict each other, or a value no query can take, are refused before
/// anything runs, where they were ignored (or failed late with an SQL error).
#[test]
fn contradictory_or_out_of_range_flags_are_refused() {
    let target = Target::new();
    assert!(target.run(&["init"]).status.success());
    let usage = |args: &[&str], flag: &str| {
        let out = target.run(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
    };
    usage(&["audit", "--limit", "9223372036854775808"], "--limit");
    usage(&["audit", "--limit", "0"], "--limit");
    usage(&["audit", "--stats", "--limit", "1"], "--limit");
    // A time that is none is a usage error too, as `--limit abc` is.
    usage(
        &["audit", "--since", "2025-13-45"],
        "cannot read `2025-13-45` as a time",
    );
    usage(&["audit", "--until", "yesterday"], "--until");
    for filter in [
        &["--tool", "get_issue"][..],
        &["--kind", "tool"],
        &["--outcome", "denied"],
        &["--reason", "x"],
        &["--principal", "alice"],
        &["--workspace", "demo"],
        &["--since", "1d"],
        &["--until", "1d"],
        &["--limit", "3"],
    ] {
        let mut args = vec!["audit", "--verify"];
        args.extend(filter);
        usage(&args, filter[0]);
    }
    for other in [
        &["--tool", "get_issue"][..],
        &["--since", "1d"],
        &["--limit", "1"],
        &["--json"],
    ] {
        let mut args = vec!["audit", "--new-checkpoint-key"];
        args.extend(other);
        usage(&args, other[0]);
    }
    usage(&["serve", "--confirm-timeout", "0"], "--confirm-timeout");

    // Ages as dates: equal ones, or a `--since` younger than `--until`, are refused (equal
    // ages were resolved a few microseconds apart, an empty window listed with exit 0).
    for (since, until) in [
        ("2025-06-23", "2025-06-22"),
        ("2025-06-22", "2025-06-22"),
        ("1h", "1h"),
        ("60m", "1h"),
        ("30m", "1h"),
    ] {
        let line = one_line_error(&target.run(&["audit", "--since", since, "--until", until]));
        assert!(
            line.contains(&format!(
                "--since `{since}` is not before --until `{until}`"
            )),
            "{line}"
        );
    }
    let ok = target.run(&["audit", "--since", "1h", "--until", "30m"]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    let ok = target.run(&["audit", "--limit", "9223372036854775807"]);
    assert!(ok.status.success(), "{}", stderr(&ok));
}

/// `AAC_CHECKPOINT_KEY` without `serve --checkpoints` signs nothing: `serve` says so.
#[test]
fn a_checkpoint_key_without_checkpoints_is_warned_about() {
    let target = Target::new();
    assert!(target.run(&["init"]).status.success());
    let out = target
        .command()
        .arg("serve")
        .env("AAC_CHECKPOINT_KEY", "ab".repeat(32))
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let warning = err.lines().next().unwrap();
    assert!(
        warning.contains("AAC_CHECKPOINT_KEY") && warning.contains("--checkpoints"),
        "{err}"
    );
    assert!(err.lines().last().unwrap().contains("AAC_TOKEN"), "{err}");
}

/// `audit --verify --json --checkpoints F --public-key K` prints one JSON object: the
/// chain's report with the checkpoints' under `checkpoints`. A public key of 64 hex
/// digits that is no Ed25519 point is called that.
#[test]
fn verify_with_checkpoints_prints_one_json_object() {
    if sqlite_only("signed checkpoints are for SQLite trails") {
        return;
    }
    use aac_tools::audit::{CheckpointKey, open_reader, write_checkpoint};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("aacworkflow.db");
    assert!(run(dir.path(), &["init"]).status.success());
    record_refused_calls(&path, 2);
    let key = CheckpointKey::generate().unwrap();
    write_checkpoint(
        &open_reader(&path).unwrap(),
        &key,
        dir.path().join("cp.jsonl"),
    )
    .unwrap();
    let verify = |json: bool, public: &str| {
        let mut args = vec!["audit", "--verify", "--checkpoints", "cp.jsonl"];
        args.extend(["--public-key", public]);
        if json {
            args.push("--json");
        }
        run(dir.path(), &args)
    };
    let out = verify(true, &key.public_hex());
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("one JSON object");
    assert_eq!(report["checked"], 2, "{report}");
    assert_eq!(report["head"][0], 2, "{report}");
    assert!(report["broken"].is_null(), "{report}");
    assert_eq!(
        report["missing_triggers"],
        serde_json::json!([]),
        "{report}"
    );
    assert_eq!(report["checkpoints"]["checked"], 1, "{report}");
    assert_eq!(report["checkpoints"]["last_seq"], 2, "{report}");
    assert!(report["checkpoints"]["problem"].is_null(), "{report}");

    let text = stdout(&verify(false, &key.public_hex()));
    assert!(text.starts_with("chain intact: 2 records"), "{text}");
    assert!(text.contains("\ncheckpoints intact: 1 signed"), "{text}");

    let line = one_line_error(&verify(false, &"02".repeat(32)));
    assert!(line.contains("not a valid Ed25519 public key"), "{line}");
    let line = one_line_error(&verify(false, "abc"));
    assert!(line.contains("64 hex digits"), "{line}");
    // Listing flags with checkpoints, without --verify: refused, not ignored.
    for listing in ["--stats", "--json"] {
        let out = run(
            dir.path(),
            &[
                "audit",
                listing,
                "--checkpoints",
                "cp.jsonl",
                "--public-key",
                &key.public_hex(),
            ],
        );
        assert!(!out.status.success(), "{listing}: {}", stdout(&out));
        assert!(stderr(&out).contains("--verify"), "{}", stderr(&out));
    }
}

/// `--expires` past 100 years is refused (it printed as raw seconds, `live until
/// 606596284930`); a scope given twice is stored once, in the order given; the hint of
/// a stdio `serve` without a token is a `token create` this server accepts.
#[test]
fn token_lifetimes_are_bounded_scopes_deduplicated_and_the_hint_complete() {
    let target = Target::new();
    assert!(target.run(&["init", "--demo"]).status.success());
    let create = |scopes: &str, expires: &str| {
        target.run(&[
            "token",
            "create",
            "--workspace",
            "demo",
            "--user",
            "bob",
            "--scopes",
            scopes,
            "--expires",
            expires,
        ])
    };
    let line = one_line_error(&create("issues:read", "1000000w"));
    assert!(line.contains("100 years"), "{line}");
    let out = create("issues:read,comments:read,issues:read", "5200w");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("scopes: issues:read comments:read,"),
        "{}",
        stderr(&out)
    );
    assert_eq!(target.tokens()[0].scopes, ["issues:read", "comments:read"]);
    let listed = stdout(&target.run(&["token", "list"]));
    assert!(
        listed.contains("live until 2"),
        "an RFC 3339 date: {listed}"
    );

    let line = one_line_error(&target.run(&["serve"]));
    assert!(
        line.contains(
            "`aacworkflow token create --user USER --workspace WORKSPACE --scopes SCOPES`"
        ),
        "{line}"
    );
    let out = target
        .command()
        .arg("serve")
        .env("AAC_TOKEN", "aac_000000000000_nope")
        .output()
        .unwrap();
    let line = one_line_error(&out);
    assert!(
        line.contains("token create --user USER --workspace WORKSPACE"),
        "{line}"
    );
}

/// An address `serve --http` cannot listen on gets one line that says what to do: the
/// port is missing, or taken (then a free one is suggested, not the same again); and a
/// stdio token the database refuses names that database (a mistyped `--db` opens
/// another one).
#[test]
fn serve_says_what_to_do_about_its_address_and_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let line = one_line_error(&run(dir.path(), &["serve", "--http", "localhost"]));
    assert!(
        line.contains("HOST:PORT") && line.contains("localhost:8080"),
        "{line}"
    );
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let line = one_line_error(&run(dir.path(), &["serve", "--http", &address]));
    assert!(line.contains("127.0.0.1:0"), "{line}");
    assert!(!line.contains(&format!("such as {address}")), "{line}");
    drop(taken);
    let output = aacworkflow(dir.path())
        .args(["--db", "typo.db", "serve"])
        .env(
            "AAC_TOKEN",
            "aac_0123456789ab_0123456789abcdef0123456789abcdef",
        )
        .output()
        .unwrap();
    let line = one_line_error(&output);
    assert!(
        line.contains("`typo.db`") && line.contains("--db"),
        "{line}"
    );
}

/// SIGTERM while calls are in hand ends a stdio `serve` as the end of stdin does: no more
/// is read, every call read so far is taken to its end and recorded, the process exits 0.
/// Killed by the signal before, it lost the records of calls whose issues were created.
#[test]
fn sigterm_on_stdio_leaves_a_record_of_every_call_that_ran() {
    a_stop_signal_on_stdio_leaves_a_record_of_every_call_that_ran("TERM");
}

/// SIGHUP (a terminal or SSH session closing on a server in its foreground) and SIGQUIT
/// (Ctrl-\\) stop a stdio `serve` as SIGTERM does. Left to their default, they killed it
/// where it stood: 47 of 4,866 issues created had no record.
#[test]
fn sighup_and_sigquit_on_stdio_leave_a_record_of_every_call_that_ran() {
    a_stop_signal_on_stdio_leaves_a_record_of_every_call_that_ran("HUP");
    a_stop_signal_on_stdio_leaves_a_record_of_every_call_that_ran("QUIT");
}

fn a_stop_signal_on_stdio_leaves_a_record_of_every_call_that_ran(name: &str) {
    use std::io::{BufRead, Write};
    use std::process::Stdio;
    let target = Target::new();
    let token = alices_demo_token(&target);
    let before = target.count_issues();
    let mut child = stdio_serve(&target, &token, Stdio::null());
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = opening_lines();
    for i in 1..=300 {
        lines.push(format!(
            r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"create_issue","arguments":{{"title":"t{i}"}}}}}}"#
        ));
    }
    stdin
        .write_all((lines.join("\n") + "\n").as_bytes())
        .unwrap();
    // Read every answer (a full pipe would hold the server), and say when the first came.
    let (first_tx, first_rx) = std::sync::mpsc::channel();
    let reader = {
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut answers = 0;
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if line.contains("\"result\"") && !line.contains("\"protocolVersion\"") {
                    answers += 1;
                    let _ = first_tx.send(());
                }
            }
            answers
        })
    };
    first_rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("a first answer");
    signal(&child, name);
    let status = child.wait().unwrap();
    drop(stdin);
    let answers = reader.join().unwrap();
    assert!(status.success(), "exited {status:?} on SIG{name}");
    let created = target.count_issues() - before;
    assert!(created >= 1, "{created}");
    let audit = target.run(&["audit", "--tool", "create_issue", "--json"]);
    assert!(audit.status.success(), "{}", stderr(&audit));
    let records: Vec<serde_json::Value> = stdout(&audit)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let successes = records.iter().filter(|r| r["outcome"] == "success").count();
    assert_eq!(
        successes as i64,
        created,
        "one success record per issue created ({answers} answered, {} records)",
        records.len()
    );
    assert!(records.len() <= 300 && answers <= records.len());
    let verify = target.run(&["audit", "--verify"]);
    assert!(verify.status.success(), "{}", stderr(&verify));
}

/// A second SIGTERM right after the first (an operator's double Ctrl-C) stops a stdio
/// `serve` at once, exit 130, yet leaves a record of every issue created: the calls in
/// hand are abandoned (nothing of theirs commits from then on) and the process exits once
/// their records are written. It used to exit on the spot, between a call's commit and
/// its record: 5 to 16 of 40 pipelined calls created their issue with no record.
#[test]
fn a_second_sigterm_on_stdio_exits_at_once_leaving_a_record_of_every_issue_created() {
    use std::io::{BufRead, Write};
    use std::process::Stdio;
    let target = Target::new();
    let token = alices_demo_token(&target);
    let before = target.count_issues();
    for round in 0..5 {
        let mut child = stdio_serve(&target, &token, Stdio::null());
        let mut stdin = child.stdin.take().unwrap();
        let mut lines = opening_lines();
        for i in 1..=60 {
            lines.push(format!(
                r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"create_issue","arguments":{{"title":"r{round}-{i}"}}}}}}"#
            ));
        }
        stdin
            .write_all((lines.join("\n") + "\n").as_bytes())
            .unwrap();
        let (first_tx, first_rx) = std::sync::mpsc::channel();
        let out = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if line.contains("\"result\"") && !line.contains("\"protocolVersion\"") {
                    let _ = first_tx.send(());
                }
            }
        });
        first_rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("a first answer");
        let stopped = std::time::Instant::now();
        sigterm(&child);
        std::thread::sleep(std::time::Duration::from_millis(2 + round));
        sigterm(&child);
        let status = child.wait().unwrap();
        let took = stopped.elapsed();
        drop(stdin);
        reader.join().unwrap();
        // 130 when the second signal came before the session ended, 0 after.
        assert!(
            matches!(status.code(), Some(0 | 130)),
            "round {round}: exited {status:?}"
        );
        assert!(
            took < std::time::Duration::from_secs(10),
            "round {round}: {took:?}"
        );
    }
    let created = target.count_issues() - before;
    let audit = target.run(&["audit", "--tool", "create_issue", "--json"]);
    assert!(audit.status.success(), "{}", stderr(&audit));
    let records: Vec<serde_json::Value> = stdout(&audit)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // A call abandoned after its commit is recorded `success` (499,
    // `cancelled_after_commit`): what it wrote stands.
    let successes = records.iter().filter(|r| r["outcome"] == "success").count();
    assert_eq!(
        successes as i64,
        created,
        "one success record per issue created ({} records)",
        records.len()
    );
    let verify = target.run(&["audit", "--verify"]);
    assert!(verify.status.success(), "{}", stderr(&verify));
}

/// stdio `serve` whose stdout is a file (or a terminal), not a pipe, and whose stdin
/// stays open: SIGTERM ends it at once, its call recorded. Its stdin used to be read on
/// the runtime's blocking pool, whose read of a stdin where nothing more comes held the
/// process until the client closed it.
#[test]
fn sigterm_stops_a_stdio_server_whose_stdout_is_not_a_pipe() {
    use std::io::Write;
    use std::process::Stdio;
    let target = Target::new();
    let token = alices_demo_token(&target);
    let out_path = target.dir.path().join("answers.jsonl");
    let out = std::fs::File::create(&out_path).unwrap();
    let mut child = target
        .command()
        .arg("serve")
        .env("AAC_TOKEN", &token)
        .stdin(Stdio::piped())
        .stdout(Stdio::from(out))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let lines = [
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_issues","arguments":{}}}"#,
    ];
    stdin
        .write_all((lines.join("\n") + "\n").as_bytes())
        .unwrap();
    // A guard against a hang, not a timing assertion.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !std::fs::read_to_string(&out_path)
        .unwrap()
        .contains(r#""id":1"#)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no answer to the call"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    sigterm(&child);
    // stdin stays open throughout: the client has not left.
    let status = exited_within_30_s(&mut child);
    drop(stdin);
    let status = status.expect("the server stops on SIGTERM with its stdin open");
    assert!(status.success(), "{status:?}");
    let audit = target.run(&["audit", "--tool", "list_issues", "--json"]);
    assert_eq!(stdout(&audit).lines().count(), 1, "{}", stdout(&audit));
}

/// A stdio server whose client has stopped reading (its stdout full, answers waiting)
/// still stops on SIGTERM, with stdout a pipe (read on the reactor) or a socket (as Node.js
/// hosts start servers: written by a thread of its own). It used to wait for ever: for
/// room to read the signal's end of input, or in the blocking pool's write to stdout.
#[test]
fn sigterm_stops_a_stdio_server_whose_client_no_longer_reads() {
    use std::io::Write;
    use std::process::Stdio;
    let target = Target::new();
    let token = alices_demo_token(&target);
    for socket in [false, true] {
        let (stdout, _unread) = if socket {
            let (server_end, client_end) = std::os::unix::net::UnixStream::pair().unwrap();
            (
                Stdio::from(std::os::fd::OwnedFd::from(server_end)),
                Some(client_end),
            )
        } else {
            (Stdio::piped(), None)
        };
        let mut child = target
            .command()
            .arg("serve")
            .env("AAC_TOKEN", &token)
            .stdin(Stdio::piped())
            .stdout(stdout)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let _unread_pipe = child.stdout.take();
        let writer = std::thread::spawn(move || {
            let mut lines = vec![
                r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#.to_owned(),
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned(),
            ];
            for i in 1..=3000 {
                lines.push(format!(
                    r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"list_issues","arguments":{{}}}}}}"#
                ));
            }
            // Blocks once the server stops reading; fails once it has exited.
            let _ = stdin.write_all((lines.join("\n") + "\n").as_bytes());
            stdin
        });
        std::thread::sleep(std::time::Duration::from_secs(2));
        sigterm(&child);
        let signalled = std::time::Instant::now();
        let status = exited_within_30_s(&mut child);
        assert!(
            status.is_some(),
            "socket stdout: {socket}: the server did not stop on SIGTERM"
        );
        // One drain of 5 s for the answers nobody reads, not one for rmcp's wait for them
        // and another for the output's end (10 s before): 9 s leaves room for a busy
        // machine, not for a second drain.
        let took = signalled.elapsed();
        assert!(
            took < std::time::Duration::from_secs(9),
            "socket stdout: {socket}: SIGTERM took {took:?}"
        );
        drop(writer.join());
    }
}

/// The same, when what waits to be written is the framing's own answer (a line it
/// refuses before rmcp: a call followed by junk): that write held the reading of the
/// input, and SIGTERM, for ever (a red-team run killed it after 45 s).
#[test]
fn sigterm_stops_a_stdio_server_whose_own_refusal_cannot_be_written() {
    use std::io::Write;
    use std::process::Stdio;
    let target = Target::new();
    let token = alices_demo_token(&target);
    let mut child = stdio_serve(&target, &token, Stdio::null());
    let mut stdin = child.stdin.take().unwrap();
    let _unread_pipe = child.stdout.take();
    let mut lines = opening_lines();
    for i in 1..=40 {
        lines.push(format!(
            r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"list_issues","arguments":{{}}}}}}"#
        ));
    }
    for i in 101..=105 {
        lines.push(format!(
            r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"list_issues"}}}} x"#
        ));
    }
    stdin
        .write_all((lines.join("\n") + "\n").as_bytes())
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(3));
    sigterm(&child);
    assert!(
        exited_within_30_s(&mut child).is_some(),
        "the server did not stop on SIGTERM"
    );
    drop(stdin);
}

/// A host that never reads the server's stderr: once the pipe is full (64 KiB, a few
/// hundred warnings), a log line written there blocked the thread that wrote it, and with
/// it the server (a red-team run: 293 of 1,001 calls answered, SIGTERM ignored). Log
/// lines are written by a thread of their own and dropped when they cannot be: every call
/// is answered, and SIGTERM ends the session.
#[test]
fn a_stderr_nobody_reads_never_blocks_the_server() {
    use std::io::{BufRead, Write};
    use std::process::Stdio;
    let target = Target::new();
    let token = alices_demo_token(&target);
    let mut child = stdio_serve(&target, &token, Stdio::piped());
    let _unread_stderr = child.stderr.take();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (answers, answered) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let message: serde_json::Value = serde_json::from_str(&line).unwrap();
            if answers.send(message["id"].clone()).is_err() {
                break;
            }
        }
    });
    const CALLS: usize = 2000;
    let mut lines = opening_lines();
    // Arguments of the wrong shape: each answered -32602, each logged as a warning.
    for i in 1..=CALLS {
        lines.push(format!(
            r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"get_issue","arguments":[{i}]}}}}"#
        ));
    }
    lines.push(r#"{"jsonrpc":"2.0","id":"last","method":"tools/call","params":{"name":"list_issues","arguments":{}}}"#.to_owned());
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all((lines.join("\n") + "\n").as_bytes());
        stdin
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut seen = 0;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let id = answered
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("{seen} answers, then none"));
        seen += 1;
        if id == "last" {
            break;
        }
    }
    assert_eq!(
        seen,
        CALLS + 2,
        "the initialize answer, every call, the last"
    );
    let _stdin = writer.join().unwrap();
    sigterm(&child);
    assert!(
        exited_within_30_s(&mut child).is_some(),
        "the server did not stop on SIGTERM"
    );
}

/// A PostgreSQL server that cannot be reached is named with why (the connection refused,
/// the name unknown), in one line, not only "error connecting to server".
#[test]
fn an_unreachable_postgres_says_why() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = aacworkflow(dir.path())
        .args(["token", "list"])
        .env(
            "AAC_DB",
            format!("postgres://postgres@127.0.0.1:{port}/nope"),
        )
        .output()
        .unwrap();
    let line = one_line_error(&out);
    assert!(line.contains("Connection refused"), "{line}");
}

/// A server whose stderr is closed (a pipe whose reader left, `serve … 2>&1 | head -1`)
/// still stops on SIGTERM: a log line it cannot write is dropped, where the logger's own
/// report of it panicked the task that handles the signal, and the server served on.
#[test]
fn sigterm_stops_an_http_server_whose_stderr_is_closed() {
    let target = Target::new();
    assert!(target.run(&["init", "--demo"]).status.success());
    let (mut child, err, _) = http_serve_until(&target, &[], "serving MCP on");
    drop(err);
    sigterm(&child);
    let status = exited_within_30_s(&mut child);
    let status = status.expect("the server stops on SIGTERM");
    assert!(status.success(), "{status:?}");
    // Stopped cleanly, the file alone is the database: the write-ahead log (which held
    // what `serve` wrote at start) is empty.
    if target.pg.is_none() {
        let wal = target.dir.path().join("aacworkflow.db-wal");
        let left = std::fs::metadata(&wal).map_or(0, |m| m.len());
        assert_eq!(left, 0, "{} holds {left} bytes", wal.display());
    }
}

/// `serve` says at start which tools it serves, by name (every `#[mcp_tool]` the binary
/// links, from any of its crates: a dependency's tool served by surprise shows), the ones
/// of `--read-only` alone in that mode.
#[test]
fn serve_names_the_tools_it_serves() {
    let target = Target::new();
    assert!(target.run(&["init", "--demo"]).status.success());
    for (extra, tools) in [
        (
            None,
            "tools=10 (assign_issue_to_agent, comment_issue, create_issue, ",
        ),
        (
            Some("--read-only"),
            "tools=4 (dashboard_usage_daily, get_issue, list_comments, list_issues)",
        ),
    ] {
        let extra: Vec<&str> = extra.into_iter().collect();
        let (mut child, _, line) = http_serve_until(&target, &extra, "serving Streamable HTTP");
        let _ = child.kill();
        let _ = child.wait();
        assert!(line.contains(tools), "{extra:?}: {line}");
    }
}

/// `serve --http 127.0.0.1:0 [extra]` at log level `info`, its stderr read up to the
/// line that holds `marker`: the process, the rest of its stderr, and that line.
fn http_serve_until(
    target: &Target,
    extra: &[&str],
    marker: &str,
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStderr>,
    String,
) {
    use std::io::BufRead;
    use std::process::Stdio;
    let mut child = target
        .command()
        .args(["serve", "--http", "127.0.0.1:0"])
        .args(extra)
        .env("AAC_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains(marker) {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "the server ended");
    }
    (child, err, line)
}

/// A stateless replica that asks a person, started without shared request-state keys,
/// says so before it serves: behind a balancer, a retry another replica takes would be
/// refused there. With keys, or when the model's `confirm: true` is enough, nothing.
#[test]
fn a_stateless_replica_that_asks_without_shared_keys_says_so() {
    use std::io::BufRead;
    use std::process::Stdio;
    let target = Target::new();
    assert!(target.run(&["init", "--demo"]).status.success());
    for (confirm, keys, warned) in [
        ("user", None, true),
        ("user-or-argument", None, true),
        ("user", Some("ab".repeat(32)), false),
        ("argument", None, false),
    ] {
        let mut command = target.command();
        command
            .args([
                "serve",
                "--http",
                "127.0.0.1:0",
                "--stateless",
                "--confirm",
                confirm,
            ])
            .env("AAC_LOG", "info")
            .env_remove("AAC_REQUEST_STATE_KEYS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(keys) = &keys {
            command.env("AAC_REQUEST_STATE_KEYS", keys);
        }
        let mut child = command.spawn().unwrap();
        let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
        let (mut line, mut said) = (String::new(), false);
        while !line.contains("serving MCP on") {
            line.clear();
            assert!(err.read_line(&mut line).unwrap() > 0, "the server ended");
            said |= line.contains("AAC_REQUEST_STATE_KEYS is not set");
        }
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(
            said,
            warned,
            "--confirm {confirm}, keys: {}",
            keys.is_some()
        );
    }
}

/// `init --demo` in `target`, and a token of alice's with every scope.
fn alices_demo_token(target: &Target) -> String {
    assert!(target.run(&["init", "--demo"]).status.success());
    let token = target.run(&[
        "token",
        "create",
        "--workspace",
        "demo",
        "--user",
        "alice",
        "--scopes",
        "all",
    ]);
    stdout(&token).trim().to_owned()
}

/// How `child` exited, if it did within 30 s (a guard against a hang, not a timing
/// assertion); killed otherwise.
fn exited_within_30_s(child: &mut std::process::Child) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `serve` over stdio with `token`, its stdin and stdout piped, its stderr `stderr`.
fn stdio_serve(target: &Target, token: &str, stderr: std::process::Stdio) -> std::process::Child {
    target
        .command()
        .arg("serve")
        .env("AAC_TOKEN", token)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

/// The lines that open an MCP session over stdio: `initialize`, then `initialized`.
fn opening_lines() -> Vec<String> {
    vec![
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned(),
    ]
}

/// Send SIGTERM to `child`.
fn sigterm(child: &std::process::Child) {
    signal(child, "TERM");
}

/// Send the signal `name` (`TERM`, `HUP`…) to `child`.
fn signal(child: &std::process::Child, name: &str) {
    let killed = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
}

/// Issue 18: a stdio server is quiet by default, where a host may show its stderr to a
/// person. A refused resource read, prompt or completion is in the audit trail, as a
/// refused tool call is, and like it logs nothing unless `AAC_LOG` asks (rmcp warned of
/// each, with a debug dump of the error).
#[test]
fn refused_reads_log_nothing_over_stdio_unless_asked() {
    use std::io::Write;
    use std::process::Stdio;
    let target = Target::new();
    let token = alices_demo_token(&target);
    let stderr_of = |log: Option<&str>| {
        let mut command = target.command();
        command
            .arg("serve")
            .env("AAC_TOKEN", &token)
            .env_remove("RUST_LOG");
        match log {
            Some(level) => command.env("AAC_LOG", level),
            None => command.env_remove("AAC_LOG"),
        };
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = opening_lines();
        lines.extend([
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"aacworkflow://issues/NOPE-1"}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":2,"method":"prompts/get","params":{"name":"no_such_prompt"}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"delete_issue","arguments":{"issue_id":"AAC-1"}}}"#.to_owned(),
        ]);
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all((lines.join("\n") + "\n").as_bytes())
            .unwrap();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let quiet = stderr_of(None);
    assert!(
        quiet.trim().is_empty(),
        "a stdio server logged by default:\n{quiet}"
    );
    // Asked for warnings, they are there: the default left them out.
    let asked = stderr_of(Some("warn"));
    assert!(
        asked.contains("response error") && asked.contains("unknown_prompt"),
        "{asked}"
    );
    // Each refusal is in the trail.
    let audit = target.run(&["audit", "--json"]);
    let reasons: Vec<String> = stdout(&audit)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|r| r["reason"].as_str().map(str::to_owned))
        .collect();
    for reason in ["not_found", "unknown_prompt", "destructive_flag_missing"] {
        let n = reasons.iter().filter(|r| *r == reason).count();
        assert_eq!(n, 2, "{reason}: {reasons:?}");
    }
}

//! The README's "A complete tool", as a person would use it: its `Cargo.toml` and Rust
//! blocks become a fresh crate, which is built (into the workspace's target directory, so
//! that the dependencies are not built again) and run: `manifest`, `token create`, an MCP
//! session over stdio with that token, `audit --json`, `audit --verify`, and the errors a
//! person meets on the way.

#![cfg(all(feature = "cli", unix))]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// The text of the README's "A complete tool" section.
fn section() -> String {
    let readme = std::fs::read_to_string(Path::new(WORKSPACE).join("README.md")).unwrap();
    let start = readme
        .find("\n## A complete tool\n")
        .expect("the README has `## A complete tool`");
    let rest = &readme[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    rest[..end].to_owned()
}

/// The body of the first fenced block whose info string starts with `lang`.
fn block(section: &str, lang: &str) -> String {
    let open = format!("```{lang}");
    let start = section
        .lines()
        .position(|l| l.starts_with(&open))
        .unwrap_or_else(|| panic!("no ```{lang} block in the section"));
    section
        .lines()
        .skip(start + 1)
        .take_while(|l| !l.starts_with("```"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The workspace's target directory: this test runs from `<target>/<profile>/deps/`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors().nth(3).unwrap().to_owned()
}

/// The README's crate, written into `dir` and built; the path of its binary.
fn build_readme_crate(dir: &Path) -> PathBuf {
    let section = section();
    let workspace = Path::new(WORKSPACE).canonicalize().unwrap();
    let dependencies = block(&section, "toml");
    assert!(
        dependencies.contains("aac-tools = \"0.1\""),
        "the README's dependencies name aac-tools: {dependencies}"
    );
    let dependencies = dependencies.replace(
        "aac-tools = \"0.1\"",
        &format!(
            "aac-tools = {{ path = {:?} }}",
            workspace.join("aac-tools").display().to_string()
        ),
    );
    // The workspace's profile, so that the dependencies built for it are used as they are.
    let manifest = format!(
        "[package]\nname = \"notes\"\nversion = \"0.1.0\"\nedition = \"2024\"\npublish = false\n\n\
         {dependencies}\n\
         [workspace]\n\n\
         [profile.dev]\ndebug = \"line-tables-only\"\n\n\
         [profile.dev.package.\"*\"]\ndebug = false\n\n\
         [profile.dev.package.aac-tools]\ndebug = \"line-tables-only\"\n\n\
         [profile.dev.package.aac-tools-macros]\ndebug = \"line-tables-only\"\n"
    );
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    std::fs::write(dir.join("src/main.rs"), block(&section, "rust")).unwrap();
    // The workspace's versions of every dependency.
    std::fs::copy(workspace.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let target = target_dir();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--offline", "--quiet"])
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the README's crate does not build:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    target.join("debug").join("notes")
}

struct Notes {
    bin: PathBuf,
    dir: tempfile::TempDir,
}

impl Notes {
    fn command(&self) -> Command {
        let mut command = Command::new(&self.bin);
        command
            .current_dir(self.dir.path())
            .env_remove("AAC_DB")
            .env_remove("AAC_TOKEN")
            .env_remove("AAC_LOG")
            .env_remove("RUST_LOG");
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command().args(args).output().unwrap()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// Exit 1 and one line on stderr, `error: …`, containing `expect`.
fn fails_with(out: &Output, expect: &str) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.starts_with("error: ") && err.contains(expect), "{err}");
    assert!(out.stdout.is_empty());
}

/// Send one JSON-RPC line, and read lines until the answer to `id` (when there is one).
fn exchange(
    stdin: &mut impl Write,
    stdout: &mut impl BufRead,
    message: Value,
    id: Option<i64>,
) -> Value {
    writeln!(stdin, "{message}").unwrap();
    stdin.flush().unwrap();
    let Some(id) = id else {
        return Value::Null;
    };
    loop {
        let mut line = String::new();
        let n = stdout.read_line(&mut line).unwrap();
        assert!(n > 0, "the server closed stdout before answering {message}");
        let answer: Value = serde_json::from_str(&line).unwrap();
        if answer["id"] == id {
            return answer;
        }
    }
}

#[test]
fn the_readme_server_runs_takes_a_token_and_is_audited() {
    let dir = tempfile::tempdir().unwrap();
    let notes = Notes {
        bin: build_readme_crate(&dir.path().join("crate")),
        dir,
    };
    let db = notes.dir.path().join("notes.db");

    // --help speaks of the program by its own name.
    let help = notes.run(&["--help"]);
    assert!(help.status.success());
    let help = text(&help.stdout);
    for word in [
        "Notes over MCP",
        "Usage: notes",
        "serve",
        "token",
        "audit",
        "manifest",
    ] {
        assert!(help.contains(word), "{word}: {help}");
    }
    assert_eq!(notes.run(&["serve", "--stateless"]).status.code(), Some(2));

    // The manifest, without a database.
    let manifest = notes.run(&["manifest"]);
    assert!(manifest.status.success());
    assert!(!db.exists(), "manifest needs no database");
    let manifest: Value = serde_json::from_slice(&manifest.stdout).unwrap();
    assert!(manifest.to_string().contains("\"get_note\""), "{manifest}");

    // A file that is not a database, or a directory, is named and left alone.
    let garbage = notes.dir.path().join("notes.txt");
    std::fs::write(&garbage, "not a database\n".repeat(300)).unwrap();
    for args in [&["token", "list"][..], &["audit"], &["serve"]] {
        let mut with_db = vec!["--db", "notes.txt"];
        with_db.extend(args);
        let out = notes
            .command()
            .args(&with_db)
            .env("AAC_TOKEN", "x")
            .output()
            .unwrap();
        fails_with(
            &out,
            "`notes.txt` is not an SQLite database, or is corrupt; pass --db",
        );
    }
    assert_eq!(
        std::fs::read_to_string(&garbage).unwrap(),
        "not a database\n".repeat(300)
    );
    let out = notes.run(&["token", "list", "--db", notes.dir.path().to_str().unwrap()]);
    fails_with(&out, "is a directory");

    // Commands that read the database say how to create it.
    fails_with(
        &notes.run(&["audit"]),
        "`notes serve` or `notes token create`",
    );
    fails_with(&notes.run(&["token", "list"]), "no database at `notes.db`");
    // Bad input is refused before anything is written.
    let create = |args: &[&str]| {
        let mut all = vec!["token", "create", "--subject", "ann"];
        all.extend(args);
        notes.run(&all)
    };
    fails_with(
        &create(&["--scopes", "notes:write"]),
        "unknown scope `notes:write`; the tools use: notes:read (or `all`)",
    );
    fails_with(&create(&["--scopes", "all", "--expires", "3x"]), "30d");
    assert!(!db.exists());

    // A token: alone on stdout, what it is on stderr.
    let created = create(&["--scopes", "all", "--expires", "30d"]);
    assert!(created.status.success(), "{}", text(&created.stderr));
    let stdout = text(&created.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let token = stdout.trim().to_owned();
    assert!(token.starts_with("aac_"), "{token}");
    let said = text(&created.stderr);
    assert!(
        said.starts_with("notes: token ")
            && said.contains(" for ann, scopes: notes:read, expires in 30d"),
        "{said}"
    );
    let listed = text(&notes.run(&["token", "list"]).stdout);
    assert!(
        listed.contains("  ann  live until ") && listed.ends_with("  [notes:read]\n"),
        "{listed}"
    );
    assert!(!listed.contains(&token));

    // serve over stdio needs the token.
    fails_with(&notes.run(&["serve"]), "set AAC_TOKEN");
    let refused = notes
        .command()
        .arg("serve")
        .env("AAC_TOKEN", "aac_000000000000_nope")
        .output()
        .unwrap();
    fails_with(&refused, "AAC_TOKEN is refused");

    // An MCP session with it: initialize, then the README's tool.
    let mut child = notes
        .command()
        .arg("serve")
        .env("AAC_TOKEN", &token)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let init = exchange(
        &mut stdin,
        &mut stdout,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "readme-test", "version": "0"}}}),
        Some(1),
    );
    assert_eq!(init["result"]["serverInfo"]["name"], "notes", "{init}");
    exchange(
        &mut stdin,
        &mut stdout,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        None,
    );
    let call = exchange(
        &mut stdin,
        &mut stdout,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "get_note", "arguments": {"id": 1}}}),
        Some(2),
    );
    assert_eq!(call["result"]["isError"], false, "{call}");
    assert_eq!(
        call["result"]["structuredContent"],
        json!({"id": 1, "text": "Buy milk"})
    );
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    // A host may show this stream to a person: nothing but warnings and errors.
    assert_eq!(text(&out.stderr), "", "stdio serve is quiet by default");

    // The call's record.
    let audit = notes.run(&["audit", "--json"]);
    assert!(audit.status.success(), "{}", text(&audit.stderr));
    let records: Vec<Value> = text(&audit.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!(record["tool"], "get_note");
    assert_eq!(record["outcome"], "success");
    assert_eq!(record["principal"], "ann");
    assert_eq!(record["transport"], "stdio");
    assert_eq!(record["scopes_provided"], json!(["notes:read"]));
    let table = text(&notes.run(&["audit", "--tool", "get_note"]).stdout);
    assert_eq!(table.lines().count(), 2, "{table}");
    assert!(
        table.lines().nth(1).unwrap().contains("get_note  success"),
        "{table}"
    );
    let verify = notes.run(&["audit", "--verify"]);
    assert!(verify.status.success());
    assert!(
        text(&verify.stdout).starts_with("chain intact: 1 records, head seq 1 hash "),
        "{}",
        text(&verify.stdout)
    );

    // Revoked, the token no longer serves.
    let revoked = notes.run(&["token", "revoke", &token]);
    assert!(revoked.status.success(), "{}", text(&revoked.stderr));
    let after = notes
        .command()
        .arg("serve")
        .env("AAC_TOKEN", &token)
        .output()
        .unwrap();
    fails_with(&after, "token revoked");
}

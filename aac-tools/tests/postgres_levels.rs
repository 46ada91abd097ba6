//! The run-time defence at every level on PostgreSQL, through raw SQL on `Tx::client()`:
//! PostgreSQL itself refuses, as the role each level logs in as. A `Read` transaction
//! refuses every write (`READ ONLY`, and a role that may only `SELECT`), a `Write`
//! transaction refuses `DELETE`, `TRUNCATE`, schema changes and every way to another
//! role, a `Delete` transaction deletes but changes no schema and reaches none of the
//! framework's tables. Each refusal is a 500 that the pipeline records.

mod postgres_support;

use std::sync::Arc;

use aac_tools::access::{Delete, Level, Read, Write};
use aac_tools::audit::{MemorySink, Outcome};
use aac_tools::postgres::{Database, Db, DeleteDb, ReadDb, Tx, WriteDb};
use aac_tools::{
    CallRequest, Credentials, Principal, Registry, Server, Text, ToolError, mcp_tool, queries,
};
use postgres_support::TestDb;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Sql {
    sql: String,
}

/// Runs whatever SQL it is given, in its read-only transaction.
#[mcp_tool(read_only, scope = "notes:read")]
async fn pg_read_sql(db: ReadDb, args: Sql) -> Result<Text, ToolError> {
    db.run(move |tx| {
        Box::pin(async move {
            tx.client().batch_execute(&args.sql).await?;
            Ok(())
        })
    })
    .await?;
    Ok(Text("ran".into()))
}

/// Runs whatever SQL it is given, in its write transaction.
#[mcp_tool(scope = "notes:write")]
async fn pg_write_sql(db: WriteDb, args: Sql) -> Result<Text, ToolError> {
    db.run(move |tx| {
        Box::pin(async move {
            tx.client().batch_execute(&args.sql).await?;
            Ok(())
        })
    })
    .await?;
    Ok(Text("ran".into()))
}

/// Runs whatever SQL it is given, in its delete transaction.
#[mcp_tool(destructive, scope = "notes:write")]
async fn pg_delete_sql(db: DeleteDb, args: Sql) -> Result<Text, ToolError> {
    let tx = db.begin().await?;
    tx.client().batch_execute(&args.sql).await?;
    tx.commit().await?;
    Ok(Text("ran".into()))
}

/// Swallows the refusal of its delete and goes on to add a note.
#[mcp_tool(scope = "notes:write")]
async fn pg_swallow(db: WriteDb) -> Result<Text, ToolError> {
    let tx = db.begin().await?;
    let _ = tx.client().batch_execute("DELETE FROM notes").await;
    let _ = tx
        .client()
        .batch_execute("INSERT INTO notes (text) VALUES ('after')")
        .await;
    tx.commit().await?;
    Ok(Text("done".into()))
}

/// Query traits with `async fn`s, gated by their names as on SQLite.
#[queries]
pub trait ReadNotes {
    fn count_notes(&self) -> impl Future<Output = Result<i64, ToolError>> + Send;
}
impl<L: aac_tools::access::Level> ReadNotes for Tx<L> {
    async fn count_notes(&self) -> Result<i64, ToolError> {
        Ok(self
            .client()
            .query_one("SELECT count(*) FROM notes", &[])
            .await?
            .get(0))
    }
}

/// Queries that add notes.
#[queries]
pub trait UpdateNotes {
    fn add_note(&self, text: &str) -> impl Future<Output = Result<(), ToolError>> + Send;
}
impl<L: aac_tools::access::Level> UpdateNotes for Tx<L> {
    async fn add_note(&self, text: &str) -> Result<(), ToolError> {
        self.client()
            .execute("INSERT INTO notes (text) VALUES ($1)", &[&text])
            .await?;
        Ok(())
    }
}

#[derive(serde::Serialize, JsonSchema)]
struct Count {
    notes: i64,
}

/// Adds a note through the query traits and counts them.
#[mcp_tool(scope = "notes:write")]
async fn pg_add_and_count(db: WriteDb) -> Result<Count, ToolError> {
    let tx = db.begin().await?;
    tx.add_note("through a query trait").await?;
    let notes = tx.count_notes().await?;
    tx.commit().await?;
    Ok(Count { notes })
}

struct Fixture {
    test: TestDb,
    db: Database,
    sink: MemorySink,
}

async fn fixture() -> Fixture {
    let test = TestDb::new().await;
    let db = Database::connect(&test.url, test.roles.clone()).unwrap();
    db.migrate(
        "notes",
        &[
            "CREATE TABLE notes (id BIGSERIAL PRIMARY KEY, text TEXT NOT NULL);
           INSERT INTO notes (text) VALUES ('first'), ('second');
           CREATE TABLE tags (note BIGINT, tag TEXT, PRIMARY KEY (note, tag));
           INSERT INTO tags VALUES (1, 'a'), (2, 'b');",
        ],
    )
    .await
    .unwrap();
    // A token row, to prove no data role reaches it.
    let tokens = aac_tools::postgres::TokenStore::open(&db).unwrap();
    aac_tools::tokens::TokenIssuer::create(&tokens, "someone", None, &["notes:read"], None)
        .await
        .unwrap();
    Fixture {
        test,
        db,
        sink: MemorySink::new(),
    }
}

fn server(f: &Fixture, tools: &[&str]) -> Server {
    Server::builder(Registry::collect_named(tools).unwrap())
        .audit(f.sink.clone())
        .state(f.db.clone())
        .build()
        .unwrap()
}

fn caller() -> Credentials {
    Credentials::Verified(Arc::new(Principal::new(
        "caller",
        ["notes:read", "notes:write"],
    )))
}

async fn run(server: &Server, tool: &str, sql: &str) -> Result<(), ToolError> {
    let mut args = json!({ "sql": sql });
    if tool == "pg_delete_sql" {
        args["confirm"] = json!(true);
    }
    let response = server
        .call(CallRequest::new(tool, Some(args)).credentials(caller()))
        .await;
    match response.error() {
        Some(err) => Err(err.clone()),
        None => Ok(()),
    }
}

/// Everything in the application's and the framework's tables, as the owner sees it.
async fn content(f: &Fixture) -> String {
    let owner = f.test.owner().await;
    let mut out = String::new();
    for query in [
        "SELECT coalesce(string_agg(id || ':' || text, ',' ORDER BY id), '') FROM notes",
        "SELECT coalesce(string_agg(note || ':' || tag, ',' ORDER BY note, tag), '') FROM tags",
        "SELECT count(*)::text FROM aac_tokens WHERE revoked_at IS NULL",
        "SELECT coalesce(string_agg(table_name::text, ',' ORDER BY table_name), '') \
         FROM information_schema.tables WHERE table_schema NOT IN ('pg_catalog', 'information_schema')",
    ] {
        let value: String = owner.query_one(query, &[]).await.unwrap().get(0);
        out.push_str(&value);
        out.push('|');
    }
    out
}

fn assert_recorded(f: &Fixture, tool: &str, reason: &str, sql: &str) {
    let record = f.sink.records().pop().unwrap();
    assert_eq!(record.tool, tool, "{sql}");
    assert_eq!(record.outcome, Outcome::Error, "{sql}");
    assert_eq!(record.reason.as_deref(), Some(reason), "{sql}");
    assert_eq!(record.status, 500, "{sql}");
}

/// What no data role may do, at any level: change the schema, reach the framework's
/// tables, become another role.
fn beyond_every_level(f: &Fixture) -> Vec<String> {
    let roles = &f.test.roles;
    vec![
        "DROP TABLE notes".into(),
        "CREATE TABLE extra (x int)".into(),
        "CREATE TEMP TABLE scratch (x int)".into(),
        "CREATE INDEX notes_text ON notes (text)".into(),
        "ALTER TABLE notes ADD COLUMN extra TEXT".into(),
        "CREATE VIEW v AS SELECT * FROM notes".into(),
        "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'".into(),
        "CREATE SCHEMA other".into(),
        "SELECT * FROM aac_tokens".into(),
        "UPDATE aac_tokens SET revoked_at = 1".into(),
        "SELECT * FROM aac_audit".into(),
        format!("SET ROLE {}", roles.tokens()),
        format!("SET ROLE {}", roles.audit()),
        format!("SET SESSION AUTHORIZATION {}", roles.tokens()),
        format!("ALTER ROLE {} SUPERUSER", roles.read()),
        // Large objects, which no table privilege governs (revoked from PUBLIC by
        // `grant_levels`, the owner here being a superuser).
        "SELECT lo_from_bytea(0, 'x'::bytea)".into(),
        "SELECT lo_create(0)".into(),
        "SELECT lo_creat(-1)".into(),
    ]
}

#[tokio::test]
async fn a_read_transaction_refuses_every_write() {
    let f = fixture().await;
    let server = server(&f, &["pg_read_sql"]);
    let before = content(&f).await;
    let mut attempts: Vec<(String, &[&str])> = vec![
        // The transaction is READ ONLY…
        (
            "INSERT INTO notes (text) VALUES ('x')".into(),
            &["read_only_violation"],
        ),
        (
            "UPDATE notes SET text = 'x'".into(),
            &["read_only_violation"],
        ),
        ("DELETE FROM notes".into(), &["read_only_violation"]),
        ("TRUNCATE notes".into(), &["read_only_violation"]),
        // …and a tool that makes it read-write still meets a role that may only read.
        (
            "SET TRANSACTION READ WRITE; INSERT INTO notes (text) VALUES ('x')".into(),
            &["level_violation"],
        ),
        (
            "COMMIT; SET default_transaction_read_only = off; DELETE FROM tags".into(),
            &["read_only_violation", "level_violation"],
        ),
        (
            format!("SET ROLE {}", f.test.roles.delete()),
            &["level_violation"],
        ),
        (
            "RESET ROLE; SET TRANSACTION READ WRITE; UPDATE notes SET text = 'x'".into(),
            &["level_violation"],
        ),
    ];
    for sql in beyond_every_level(&f) {
        attempts.push((sql, &["read_only_violation", "level_violation"]));
    }
    for (sql, reasons) in &attempts {
        let err = run(&server, "pg_read_sql", sql)
            .await
            .expect_err(&format!("`{sql}` is refused"));
        assert!(
            reasons.contains(&err.reason()),
            "`{sql}`: {} {}",
            err.reason(),
            err.message()
        );
        assert_eq!(content(&f).await, before, "`{sql}` changed nothing");
        assert_recorded(&f, "pg_read_sql", err.reason(), sql);
    }
    // Reading is what it may do.
    run(
        &server,
        "pg_read_sql",
        "SELECT count(*) FROM notes JOIN tags ON tags.note = notes.id",
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_write_transaction_refuses_deletes_truncates_and_schema_changes() {
    let f = fixture().await;
    let server = server(&f, &["pg_write_sql", "pg_swallow"]);
    let before = content(&f).await;
    let mut attempts: Vec<String> = vec![
        "DELETE FROM notes".into(),
        "DELETE FROM notes WHERE id = 1".into(),
        "DELETE FROM tags".into(),
        "TRUNCATE notes".into(),
        "TRUNCATE tags".into(),
        "RESET ROLE; DELETE FROM notes".into(),
        format!("SET ROLE {}; DELETE FROM notes", f.test.roles.delete()),
        // A write that comes first is rolled back with the rest.
        "INSERT INTO notes (text) VALUES ('x'); DELETE FROM notes WHERE text = 'x'".into(),
        "INSERT INTO aac_audit DEFAULT VALUES".into(),
    ];
    attempts.extend(beyond_every_level(&f));
    for sql in &attempts {
        let err = run(&server, "pg_write_sql", sql)
            .await
            .expect_err(&format!("`{sql}` is refused"));
        assert_eq!(
            err.reason(),
            "level_violation",
            "`{sql}`: {}",
            err.message()
        );
        assert!(
            err.message().contains("permission denied") || err.message().contains("must be"),
            "PostgreSQL says why: {}",
            err.message()
        );
        assert_eq!(content(&f).await, before, "`{sql}` changed nothing");
        assert_recorded(&f, "pg_write_sql", "level_violation", sql);
    }

    // A tool that swallows the refusal does not get the rest of its transaction in.
    let response = server
        .call(CallRequest::new("pg_swallow", Some(json!({}))).credentials(caller()))
        .await;
    let err = response
        .error()
        .expect("the aborted transaction fails the call");
    assert_eq!(err.reason(), "transaction_aborted");
    assert_eq!(content(&f).await, before, "nothing of it was kept");
    assert_recorded(&f, "pg_swallow", "transaction_aborted", "swallow");

    // What it may do, it does.
    for sql in [
        "SELECT count(*) FROM notes",
        "INSERT INTO notes (text) VALUES ('third')",
        "UPDATE notes SET text = upper(text)",
        "INSERT INTO tags VALUES (3, 'c') ON CONFLICT DO NOTHING",
    ] {
        run(&server, "pg_write_sql", sql)
            .await
            .unwrap_or_else(|e| panic!("`{sql}`: {e:?}"));
    }
    let texts: Vec<String> = f.test.column("SELECT text FROM notes ORDER BY id").await;
    assert_eq!(texts, ["FIRST", "SECOND", "THIRD"]);
}

#[tokio::test]
async fn a_delete_transaction_deletes_but_changes_no_schema() {
    let f = fixture().await;
    let server = server(&f, &["pg_delete_sql"]);
    let before = content(&f).await;
    let mut attempts = vec![
        "DELETE FROM aac_tokens".to_owned(),
        "DELETE FROM aac_audit".to_owned(),
        "TRUNCATE aac_tokens".to_owned(),
    ];
    attempts.extend(beyond_every_level(&f));
    for sql in &attempts {
        let err = run(&server, "pg_delete_sql", sql)
            .await
            .expect_err(&format!("`{sql}` is refused"));
        assert_eq!(
            err.reason(),
            "level_violation",
            "`{sql}`: {}",
            err.message()
        );
        assert_eq!(content(&f).await, before, "`{sql}` changed nothing");
    }
    run(
        &server,
        "pg_delete_sql",
        "DELETE FROM notes WHERE id = 1; TRUNCATE tags",
    )
    .await
    .unwrap();
    let owner = f.test.owner().await;
    let left: i64 = owner
        .query_one("SELECT count(*) FROM notes", &[])
        .await
        .unwrap()
        .get(0);
    let tags: i64 = owner
        .query_one("SELECT count(*) FROM tags", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!((left, tags), (1, 0));
}

#[tokio::test]
async fn query_traits_run_in_the_levels_transaction() {
    let f = fixture().await;
    let server = server(&f, &["pg_add_and_count"]);
    let response = server
        .call(CallRequest::new("pg_add_and_count", Some(json!({}))).credentials(caller()))
        .await;
    assert!(response.error().is_none(), "{:?}", response.error());
    let record = f.sink.records().pop().unwrap();
    assert_eq!(record.outcome, Outcome::Success);
    let owner = f.test.owner().await;
    let notes: i64 = owner
        .query_one("SELECT count(*) FROM notes", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(notes, 3);
}

#[tokio::test]
async fn a_newer_schema_is_refused_and_migrations_run_once() {
    let f = fixture().await;
    assert_eq!(f.db.schema_version("notes").await.unwrap(), 1);
    // Migrating again with the same list applies nothing (the inserts would duplicate).
    f.db.migrate(
        "notes",
        &["CREATE TABLE notes (id BIGSERIAL PRIMARY KEY, text TEXT NOT NULL);"],
    )
    .await
    .unwrap();
    // A second version is applied, and the roles reach its table.
    f.db.migrate(
        "notes",
        &[
            "unused: already applied",
            "CREATE TABLE labels (name TEXT PRIMARY KEY); INSERT INTO labels VALUES ('l');",
        ],
    )
    .await
    .unwrap();
    assert_eq!(f.db.schema_version("notes").await.unwrap(), 2);
    let server = server(&f, &["pg_write_sql"]);
    run(&server, "pg_write_sql", "INSERT INTO labels VALUES ('m')")
        .await
        .unwrap();
    let err = run(&server, "pg_write_sql", "DELETE FROM labels")
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "level_violation");
    // An older build meets a newer schema: refused, by name, before anything is written
    // (the framework's guards of the trail were dropped and made again, to this build's
    // text, before the application's version refused it).
    let owner = f.test.owner().await;
    let guards = "SELECT array_agg(t.oid::bigint ORDER BY t.oid) FROM pg_catalog.pg_trigger t \
                  WHERE t.tgrelid = 'aac_audit'::regclass AND NOT t.tgisinternal";
    let before: Vec<i64> = owner.query_one(guards, &[]).await.unwrap().get(0);
    assert!(!before.is_empty());
    let err = f.db.migrate("notes", &["x"]).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("at version 2, but this build knows versions up to 1"),
        "{err}"
    );
    let after: Vec<i64> = owner.query_one(guards, &[]).await.unwrap().get(0);
    assert_eq!(before, after, "the trail's guards untouched");
}

/// Adds a note, then fails without committing.
#[mcp_tool(scope = "notes:write")]
async fn pg_add_then_fail(db: WriteDb) -> Result<Text, ToolError> {
    let tx = db.begin().await?;
    tx.add_note("never kept").await?;
    Err(ToolError::conflict("changed its mind"))
}

#[tokio::test]
async fn a_transaction_dropped_uncommitted_keeps_nothing_and_taints_no_connection() {
    let f = fixture().await;
    // One connection per level: a stale transaction would be the next call's.
    let db = Database::connect_with(&f.test.url, f.test.roles.clone(), 1).unwrap();
    let server = Server::builder(
        Registry::collect_named(&["pg_add_then_fail", "pg_add_and_count"]).unwrap(),
    )
    .audit(f.sink.clone())
    .state(db)
    .build()
    .unwrap();
    for _ in 0..3 {
        let response = server
            .call(CallRequest::new("pg_add_then_fail", Some(json!({}))).credentials(caller()))
            .await;
        assert_eq!(response.error().map(ToolError::reason), Some("conflict"));
        let response = server
            .call(CallRequest::new("pg_add_and_count", Some(json!({}))).credentials(caller()))
            .await;
        assert!(response.error().is_none(), "{:?}", response.error());
    }
    let texts: Vec<String> = f.test.column("SELECT text FROM notes ORDER BY id").await;
    assert_eq!(
        texts,
        [
            "first",
            "second",
            "through a query trait",
            "through a query trait",
            "through a query trait"
        ]
    );
}

/// A connection to the test's database as `role`, outside any pool.
async fn as_role(test: &TestDb, role: &str) -> aac_tools::postgres::tokio_postgres::Client {
    use aac_tools::postgres::tokio_postgres;
    let mut config: tokio_postgres::Config = test.url.parse().unwrap();
    config.user(role);
    let (client, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// The first column of the first row of `sql`, as text.
async fn text_of<L: Level>(tx: &Tx<L>, sql: &str) -> String {
    let rows = tx.client().simple_query(sql).await.unwrap();
    rows.iter()
        .find_map(|message| match message {
            aac_tools::postgres::tokio_postgres::SimpleQueryMessage::Row(row) => {
                row.get(0).map(str::to_owned)
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("`{sql}` returned no row"))
}

/// A transaction at level `L` that changes its session (`SET`, not `SET LOCAL`) and takes
/// a session-level advisory lock; then the next one on the same pooled connection.
async fn leaves_nothing_behind<L: Level>(f: &Fixture, db: &Db<L>) {
    let tx = db.begin().await.unwrap();
    let pid = text_of(&tx, "SELECT pg_backend_pid()").await;
    let search_path = text_of(&tx, "SHOW search_path").await;
    tx.client()
        .batch_execute(
            "SET search_path = pg_catalog; SET default_transaction_isolation = serializable; \
             SELECT pg_advisory_lock(4242); SELECT pg_advisory_lock_shared(4243)",
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // Nothing held while the connection waits in the pool.
    let held: Vec<i64> = f
        .test
        .column(&format!(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = {pid}"
        ))
        .await;
    assert_eq!(
        held,
        [0],
        "{:?}: an advisory lock outlived its call",
        L::LEVEL
    );
    let tx = db.begin().await.unwrap();
    assert_eq!(
        text_of(&tx, "SELECT pg_backend_pid()").await,
        pid,
        "the same connection"
    );
    assert_eq!(text_of(&tx, "SHOW search_path").await, search_path);
    assert_eq!(
        text_of(&tx, "SHOW transaction_isolation").await,
        "read committed"
    );
    assert_eq!(text_of(&tx, "SELECT count(*) FROM notes").await, "2");
    tx.commit().await.unwrap();
}

/// A connection goes back to the pool as it came: what a call set for its session, or a
/// session-level advisory lock it took, is not the next caller's, at any level.
#[tokio::test]
async fn a_connection_goes_back_to_the_pool_as_it_came() {
    let f = fixture().await;
    // One connection per level: the next transaction is on the same connection.
    let db = Database::connect_with(&f.test.url, f.test.roles.clone(), 1).unwrap();
    leaves_nothing_behind(&f, &db.handle::<Read>()).await;
    leaves_nothing_behind(&f, &db.handle::<Write>()).await;
    leaves_nothing_behind(&f, &db.handle::<Delete>()).await;
}

/// Any role may change its own defaults (`ALTER ROLE CURRENT_USER SET …`): a data role
/// that does (a search path without the application's tables, a write level made
/// read-only, another isolation) changes nothing for the pools of a new replica, at any
/// level; and the grants that `init` and `serve` run reset the roles' settings.
#[tokio::test]
async fn a_data_role_changing_its_own_defaults_changes_nothing_for_the_pools() {
    let f = fixture().await;
    let roles = &f.test.roles;
    for (role, read_only) in [
        (roles.read(), "off"),
        (roles.write(), "on"),
        (roles.delete(), "on"),
        (roles.tokens(), "on"),
    ] {
        as_role(&f.test, &role)
            .await
            .batch_execute(&format!(
                "BEGIN READ WRITE; \
                 ALTER ROLE CURRENT_USER SET search_path = pg_catalog; \
                 ALTER ROLE CURRENT_USER SET default_transaction_read_only = {read_only}; \
                 ALTER ROLE CURRENT_USER SET default_transaction_isolation = serializable; \
                 ALTER ROLE CURRENT_USER IN DATABASE {} SET search_path = pg_catalog; \
                 COMMIT",
                f.test.name
            ))
            .await
            .unwrap_or_else(|e| panic!("{role} changes its own defaults: {e:?}"));
    }
    // A new replica: new pools, new connections.
    let db = Database::connect(&f.test.url, roles.clone()).unwrap();
    let server = Server::builder(
        Registry::collect_named(&["pg_read_sql", "pg_write_sql", "pg_delete_sql"]).unwrap(),
    )
    .audit(f.sink.clone())
    .state(db.clone())
    .build()
    .unwrap();
    for (tool, sql) in [
        ("pg_read_sql", "SELECT count(*) FROM notes"),
        ("pg_write_sql", "INSERT INTO notes (text) VALUES ('third')"),
        ("pg_delete_sql", "DELETE FROM tags WHERE note = 2"),
    ] {
        run(&server, tool, sql)
            .await
            .unwrap_or_else(|e| panic!("{tool}: `{sql}`: {}", e.message()));
    }
    let err = run(
        &server,
        "pg_read_sql",
        "INSERT INTO notes (text) VALUES ('x')",
    )
    .await
    .unwrap_err();
    assert_eq!(err.reason(), "read_only_violation");
    for level in [
        text_of(
            &db.handle::<Read>().begin().await.unwrap(),
            "SHOW transaction_isolation",
        )
        .await,
        text_of(
            &db.handle::<Write>().begin().await.unwrap(),
            "SHOW transaction_isolation",
        )
        .await,
        text_of(
            &db.handle::<Delete>().begin().await.unwrap(),
            "SHOW transaction_isolation",
        )
        .await,
    ] {
        assert_eq!(level, "read committed");
    }
    let tokens = aac_tools::postgres::TokenStore::open(&db).unwrap();
    aac_tools::tokens::TokenIssuer::create(&tokens, "someone", None, &["notes:read"], None)
        .await
        .expect("the token store works");
    // The grants put the roles' settings back as the framework sets them.
    db.grant_levels().await.unwrap();
    let settings: Vec<String> = f
        .test
        .column(&format!(
            "SELECT r.rolname || ':' || s.setdatabase::text || ':' || array_to_string(s.setconfig, ',') \
             FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole \
             WHERE r.rolname LIKE '{}\\_%' ORDER BY 1",
            roles.prefix()
        ))
        .await;
    assert_eq!(
        settings,
        [format!(
            "{}:0:default_transaction_read_only=on",
            roles.read()
        )]
    );
}

/// The grants of `init` and `serve` reach only the tables the migrating user owns: in a
/// database shared with another application, its tables keep their own rights, and a
/// table named `aac_…` that is not the framework's (a copy of `aac_tokens`) is taken
/// from every role of the levels.
#[tokio::test]
async fn grants_reach_only_the_owners_tables_and_never_a_copy_of_the_frameworks() {
    let f = fixture().await;
    let roles = &f.test.roles;
    let other = format!("{}_otherapp", roles.prefix());
    let owner = {
        use aac_tools::postgres::tokio_postgres;
        let (client, connection) = tokio_postgres::connect(&f.test.url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
    };
    owner
        .batch_execute(&format!(
            "CREATE ROLE {other} NOLOGIN; \
             CREATE TABLE payroll (name TEXT, salary INT); \
             ALTER TABLE payroll OWNER TO {other}; \
             CREATE TABLE aac_tokens_backup AS SELECT * FROM aac_tokens; \
             GRANT SELECT ON aac_tokens_backup TO PUBLIC;"
        ))
        .await
        .unwrap();
    f.db.grant_levels().await.unwrap();
    for role in [roles.read(), roles.write(), roles.delete(), roles.tokens()] {
        let client = as_role(&f.test, &role).await;
        for sql in ["SELECT * FROM payroll", "SELECT * FROM aac_tokens_backup"] {
            let err = client
                .simple_query(sql)
                .await
                .expect_err(&format!("{role}: {sql}"));
            assert!(
                err.as_db_error()
                    .is_some_and(|e| e.message().starts_with("permission denied")),
                "{role}: {sql}: {err:?}"
            );
        }
    }
    // The application's own tables are granted as before.
    as_role(&f.test, &roles.read())
        .await
        .simple_query("SELECT count(*) FROM notes")
        .await
        .unwrap();
    owner
        .batch_execute(&format!("DROP TABLE payroll; DROP ROLE {other};"))
        .await
        .unwrap();
}

/// Databases whose roles share a prefix, granting at once (three `init`s at the same
/// moment): roles are the cluster's, each database's lock is its own, so their
/// `CREATE ROLE`s can meet; the loser tries again and every grant succeeds.
#[tokio::test]
async fn databases_sharing_their_roles_grant_at_once() {
    for _ in 0..3 {
        // Declared first, dropped last: its roles outlive the other databases.
        let first = TestDb::new().await;
        let second = TestDb::new().await;
        let third = TestDb::new().await;
        let connect = |test: &TestDb| Database::connect(&test.url, first.roles.clone()).unwrap();
        let (a, b, c) = (connect(&first), connect(&second), connect(&third));
        let (ra, rb, rc) = tokio::join!(a.grant_levels(), b.grant_levels(), c.grant_levels());
        for (n, result) in [ra, rb, rc].into_iter().enumerate() {
            result.unwrap_or_else(|e| panic!("database {n}: {e}"));
        }
        drop((a, b, c));
        drop(third);
        drop(second);
    }
}

/// A data role's session holding a lock (`psql` as the role: `BEGIN; LOCK notes IN ACCESS
/// EXCLUSIVE MODE; …`) holds a call of any replica at most `LOCK_TIMEOUT` (10 s): the
/// tool's statement then fails, rather than waiting as long as the lock is held.
#[tokio::test]
async fn a_lock_held_by_a_data_role_holds_a_call_for_ten_seconds_at_most() {
    let f = fixture().await;
    for level in [
        text_of(
            &f.db.handle::<Read>().begin().await.unwrap(),
            "SHOW lock_timeout",
        )
        .await,
        text_of(
            &f.db.handle::<Write>().begin().await.unwrap(),
            "SHOW lock_timeout",
        )
        .await,
        text_of(
            &f.db.handle::<Delete>().begin().await.unwrap(),
            "SHOW lock_timeout",
        )
        .await,
    ] {
        assert_eq!(level, aac_tools::postgres::LOCK_TIMEOUT);
    }
    // The wait itself, shortened by the operator's own option (which wins over the
    // framework's): the call fails once it is over.
    let short = format!("{}?options=-c%20lock_timeout%3D300ms", f.test.url);
    let db = Database::connect(&short, f.test.roles.clone()).unwrap();
    let server = Server::builder(Registry::collect_named(&["pg_read_sql"]).unwrap())
        .audit(f.sink.clone())
        .state(db)
        .build()
        .unwrap();
    let holder = as_role(&f.test, &f.test.roles.write()).await;
    holder
        .batch_execute("BEGIN; LOCK notes IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let err = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        run(&server, "pg_read_sql", "SELECT count(*) FROM notes"),
    )
    .await
    .expect("the call ends while the lock is held")
    .unwrap_err();
    assert!(
        err.message().contains("lock"),
        "{}: {}",
        err.reason(),
        err.message()
    );
    holder.batch_execute("ROLLBACK").await.unwrap();
    run(&server, "pg_read_sql", "SELECT count(*) FROM notes")
        .await
        .unwrap();
}

/// A URL's scheme in capitals, or the URL between spaces (an `AAC_DB` typed by hand),
/// names the same database.
#[tokio::test]
async fn a_url_in_capitals_or_between_spaces_is_the_same_database() {
    let f = fixture().await;
    let url = format!(" {} ", f.test.url.replacen("postgres://", "POSTGRES://", 1));
    let db = Database::connect(&url, f.test.roles.clone()).unwrap();
    assert_eq!(db.name(), f.test.name);
    let count = text_of(
        &db.handle::<Read>().begin().await.unwrap(),
        "SELECT count(*) FROM notes",
    )
    .await;
    assert_eq!(count, "2");
}

/// Where a destructive tool parks the transaction it began, instead of committing it.
static PARKED: std::sync::Mutex<Option<Tx<Delete>>> = std::sync::Mutex::new(None);

/// Destructive: begins a delete transaction and keeps it past its call.
#[mcp_tool(destructive, scope = "notes:write")]
async fn pg_park(db: DeleteDb) -> Result<Text, ToolError> {
    let tx = db.begin().await?;
    *PARKED.lock().unwrap() = Some(tx);
    Ok(Text("parked".into()))
}

/// Read-only, but deletes through the parked transaction and commits it.
#[mcp_tool(read_only, scope = "notes:read")]
async fn pg_use_parked() -> Result<Text, ToolError> {
    let tx = PARKED.lock().unwrap().take().expect("parked");
    tx.client().batch_execute("DELETE FROM notes").await?;
    tx.commit().await?;
    Ok(Text("gone".into()))
}

/// A delete transaction kept past the call that began it (it is an owned value) cannot
/// be committed by a tool below its level: refused, and rolled back with it.
#[tokio::test]
async fn a_transaction_kept_past_its_call_is_not_committed_below_its_level() {
    let f = fixture().await;
    let server = server(&f, &["pg_park", "pg_use_parked"]);
    let before = content(&f).await;
    let parked = server
        .call(CallRequest::new("pg_park", Some(json!({"confirm": true}))).credentials(caller()))
        .await;
    assert!(parked.error().is_none(), "{:?}", parked.error());
    let used = server
        .call(CallRequest::new("pg_use_parked", None).credentials(caller()))
        .await;
    let err = used.error().expect("refused");
    assert_eq!(err.reason(), "level_violation", "{err}");
    assert_eq!(content(&f).await, before, "nothing deleted");
}

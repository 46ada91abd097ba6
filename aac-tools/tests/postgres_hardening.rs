//! What the framework's set-up and its own SQL, on PostgreSQL, refuse to be fooled by:
//! what another role made or left in the database.

mod postgres_support;

use aac_tools::access::Write;
use aac_tools::postgres::{Database, TokenStore};
use postgres_support::{TestDb, as_role};

/// What another role, which may create in `public`, plants there: a function or operator
/// of a built-in's name whose argument types match the framework's calls better than the
/// built-in's do, each noting in `hijacked` that it ran (as whoever called it).
const PLANTED: &str = "
CREATE FUNCTION public.pg_advisory_xact_lock(integer) RETURNS void LANGUAGE sql AS $$
    INSERT INTO public.hijacked VALUES ('pg_advisory_xact_lock');
    SELECT pg_catalog.pg_advisory_xact_lock($1::bigint) $$;
CREATE FUNCTION public.cardinality(smallint[]) RETURNS integer LANGUAGE sql AS $$
    INSERT INTO public.hijacked VALUES ('cardinality');
    SELECT pg_catalog.cardinality($1) $$;
CREATE FUNCTION public.oid_is(oid, regclass) RETURNS boolean LANGUAGE sql AS $$
    INSERT INTO public.hijacked VALUES ('=(oid, regclass)');
    SELECT $1 OPERATOR(pg_catalog.=) $2::oid $$;
CREATE OPERATOR public.= (LEFTARG = oid, RIGHTARG = regclass, FUNCTION = public.oid_is);
";

/// Functions and operators planted in `public` by another role are never run by the
/// framework: not by `init` (the migrations and the grants), `token create`, a level's
/// transaction, nor the reader of `audit --verify`.
#[tokio::test]
async fn functions_planted_in_public_are_never_run() {
    let test = TestDb::new().await;
    let other = format!("{}_other", test.roles.prefix());
    let admin = test.owner().await;
    admin
        .batch_execute(&format!(
            "CREATE ROLE {other} LOGIN; GRANT CREATE ON SCHEMA public TO {other}; \
             CREATE TABLE hijacked (what TEXT); GRANT INSERT ON hijacked TO PUBLIC;"
        ))
        .await
        .unwrap();
    as_role(&test, &other)
        .await
        .batch_execute(PLANTED)
        .await
        .unwrap();
    // They do run for SQL that leaves the built-ins unqualified.
    admin
        .batch_execute(
            "BEGIN; SELECT pg_advisory_xact_lock(1); COMMIT; \
             SELECT cardinality('{1}'::int2[]); \
             SELECT 1 FROM pg_class WHERE oid = to_regclass('hijacked');",
        )
        .await
        .unwrap();
    let ran = test
        .column::<String>("SELECT DISTINCT what FROM hijacked ORDER BY 1")
        .await;
    assert_eq!(
        ran,
        ["=(oid, regclass)", "cardinality", "pg_advisory_xact_lock"]
    );
    admin.batch_execute("DELETE FROM hijacked").await.unwrap();

    let db = Database::connect(&test.url, test.roles.clone()).unwrap();
    db.migrate("notes", &["CREATE TABLE notes (text TEXT NOT NULL);"])
        .await
        .unwrap();
    db.grant_levels().await.unwrap();
    let tokens = TokenStore::open(&db).unwrap();
    aac_tools::tokens::TokenIssuer::create(&tokens, "alice", None, &["notes:read"], None)
        .await
        .unwrap();
    let tx = db.handle::<Write>().begin().await.unwrap();
    tx.client()
        .batch_execute("INSERT INTO notes VALUES ('x')")
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let trail = aac_tools::postgres::mirror(db.owner_config())
        .await
        .unwrap();
    aac_tools::audit::verify_chain(&trail).unwrap();

    let ran = test.column::<String>("SELECT what FROM hijacked").await;
    assert!(
        ran.is_empty(),
        "the framework ran planted functions: {ran:?}"
    );
    admin
        .batch_execute(&format!("DROP OWNED BY {other}; DROP ROLE {other};"))
        .await
        .unwrap();
}

/// `CREATE` on `public` granted to `PUBLIC` (PostgreSQL 14 and earlier, and clusters
/// upgraded since) is revoked by the grants when the owner may: no level's role may
/// create functions there.
#[tokio::test]
async fn create_on_public_is_taken_from_every_role() {
    let test = TestDb::new().await;
    let admin = test.owner().await;
    admin
        .batch_execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
        .await
        .unwrap();
    let db = Database::connect(&test.url, test.roles.clone()).unwrap();
    db.migrate("notes", &["CREATE TABLE notes (text TEXT NOT NULL);"])
        .await
        .unwrap();
    for role in test.roles.all() {
        let may: Vec<bool> = test
            .column(&format!(
                "SELECT has_schema_privilege('{role}', 'public', 'CREATE')"
            ))
            .await;
        assert_eq!(may, [false], "{role} may create in public");
    }
}

/// A version below zero in `aac_schema` (no migration writes one) is refused by name: it
/// would skip every migration and pass for current.
#[tokio::test]
async fn a_negative_schema_version_is_refused() {
    let test = TestDb::new().await;
    let db = Database::connect(&test.url, test.roles.clone()).unwrap();
    let notes = ["CREATE TABLE notes (text TEXT NOT NULL);"];
    db.migrate("notes", &notes).await.unwrap();
    let admin = test.owner().await;
    for component in ["notes", "aac"] {
        admin
            .batch_execute(&format!(
                "UPDATE aac_schema SET version = -1 WHERE component = '{component}'"
            ))
            .await
            .unwrap();
        let err = db.migrate("notes", &notes).await.unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("`{component}` in this database is at version -1")),
            "{err}"
        );
        assert!(db.schema_version(component).await.is_err());
        admin
            .batch_execute(&format!(
                "UPDATE aac_schema SET version = 1 WHERE component = '{component}'"
            ))
            .await
            .unwrap();
    }
}

/// The write and delete roles get the owner's sequences only: another owner's, in a
/// shared database, keep their rights, and what an earlier release granted on them
/// (`ON ALL SEQUENCES`) is taken back.
#[tokio::test]
async fn sequences_of_other_owners_are_not_granted() {
    let test = TestDb::new().await;
    let other = format!("{}_seqowner", test.roles.prefix());
    let admin = test.owner().await;
    let db = Database::connect(&test.url, test.roles.clone()).unwrap();
    db.migrate("notes", &["CREATE TABLE notes (id BIGSERIAL, text TEXT);"])
        .await
        .unwrap();
    admin
        .batch_execute(&format!(
            "CREATE ROLE {other} NOLOGIN; \
             CREATE TABLE payroll (id BIGSERIAL, salary INT); \
             ALTER TABLE payroll OWNER TO {other}; \
             CREATE SEQUENCE invoices OWNED BY NONE; ALTER SEQUENCE invoices OWNER TO {other}; \
             GRANT USAGE, SELECT ON SEQUENCE invoices TO {write};",
            write = test.roles.write()
        ))
        .await
        .unwrap();
    db.grant_levels().await.unwrap();
    let may = |role: String, sequence: &'static str| {
        let test = &test;
        async move {
            test.column::<bool>(&format!(
                "SELECT has_sequence_privilege('{role}', '{sequence}', 'USAGE')"
            ))
            .await[0]
        }
    };
    for role in [test.roles.write(), test.roles.delete()] {
        assert!(may(role.clone(), "notes_id_seq").await, "{role}");
        assert!(!may(role.clone(), "payroll_id_seq").await, "{role}");
        assert!(!may(role.clone(), "invoices").await, "{role}");
    }
    admin
        .batch_execute(&format!("DROP OWNED BY {other}; DROP ROLE {other};"))
        .await
        .unwrap();
}

/// A level role that exists already with more than a level's rights (a superuser, a
/// member of `pg_write_all_data`) is refused by name at `init` and `serve` (the grants),
/// not used as it is.
#[tokio::test]
async fn a_level_role_with_more_rights_is_refused() {
    let test = TestDb::new().await;
    let admin = test.owner().await;
    let db = Database::connect(&test.url, test.roles.clone()).unwrap();
    let notes = ["CREATE TABLE notes (text TEXT NOT NULL);"];
    let (read, write) = (test.roles.read(), test.roles.write());
    admin
        .batch_execute(&format!("CREATE ROLE {read} LOGIN SUPERUSER"))
        .await
        .unwrap();
    let err = db.migrate("notes", &notes).await.unwrap_err().to_string();
    assert!(
        err.contains(&format!("`{read}`")) && err.contains("superuser"),
        "{err}"
    );
    admin
        .batch_execute(&format!(
            "ALTER ROLE {read} NOSUPERUSER CREATEDB; \
             CREATE ROLE {write} LOGIN; GRANT pg_write_all_data TO {write};"
        ))
        .await
        .unwrap();
    let err = db.grant_levels().await.unwrap_err().to_string();
    assert!(
        err.contains(&format!("`{read}`")) && err.contains("CREATEDB"),
        "{err}"
    );
    admin
        .batch_execute(&format!("ALTER ROLE {read} NOCREATEDB"))
        .await
        .unwrap();
    let err = db.grant_levels().await.unwrap_err().to_string();
    assert!(
        err.contains(&format!("`{write}`")) && err.contains("member of pg_write_all_data"),
        "{err}"
    );
    admin
        .batch_execute(&format!("REVOKE pg_write_all_data FROM {write}"))
        .await
        .unwrap();
    db.grant_levels().await.unwrap();
}

/// A level role that owns something in the database (the database itself, whose owner
/// may `SET ROLE pg_database_owner`; the schema `public`; a table, a function) or holds a
/// privilege on a parameter (`SET` of `session_replication_role` skips the audit trail's
/// triggers) is refused by name at `init` and `serve` (the grants).
#[tokio::test]
async fn a_level_role_that_owns_or_sets_is_refused() {
    let test = TestDb::new().await;
    let admin = test.owner().await;
    let db = Database::connect(&test.url, test.roles.clone()).unwrap();
    let notes = ["CREATE TABLE notes (text TEXT NOT NULL);"];
    db.migrate("notes", &notes).await.unwrap();
    let (name, read, write, delete, tokens) = (
        &test.name,
        test.roles.read(),
        test.roles.write(),
        test.roles.delete(),
        test.roles.tokens(),
    );
    let refused = |role: String, what: Vec<String>| {
        let db = &db;
        async move {
            let err = db.grant_levels().await.unwrap_err().to_string();
            assert!(err.contains(&format!("`{role}`")), "{err}");
            for what in what {
                assert!(err.contains(&what), "{what}: {err}");
            }
            let err = db.migrate("notes", &notes).await.unwrap_err().to_string();
            assert!(err.contains(&format!("`{role}`")), "{err}");
        }
    };
    admin
        .batch_execute(&format!("ALTER DATABASE {name} OWNER TO {write}"))
        .await
        .unwrap();
    refused(write.clone(), vec![format!("owns database {name}")]).await;
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {name} OWNER TO CURRENT_USER; \
             ALTER SCHEMA public OWNER TO {delete}"
        ))
        .await
        .unwrap();
    refused(delete.clone(), vec!["owns schema public".into()]).await;
    admin
        .batch_execute(&format!(
            "ALTER SCHEMA public OWNER TO pg_database_owner; \
             CREATE TABLE mine (x INT); ALTER TABLE mine OWNER TO {read}; \
             CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'; \
             ALTER FUNCTION f() OWNER TO {read};"
        ))
        .await
        .unwrap();
    refused(
        read.clone(),
        vec!["owns ".into(), "function f()".into(), "table mine".into()],
    )
    .await;
    admin
        .batch_execute(&format!(
            "DROP TABLE mine; DROP FUNCTION f(); \
             GRANT SET ON PARAMETER session_replication_role TO {tokens}"
        ))
        .await
        .unwrap();
    refused(
        tokens.clone(),
        vec!["on parameter session_replication_role".into()],
    )
    .await;
    admin
        .batch_execute(&format!(
            "REVOKE SET ON PARAMETER session_replication_role FROM {tokens}"
        ))
        .await
        .unwrap();
    db.grant_levels().await.unwrap();
}

/// A framework table that another role owns (one that may create in `public`, made it
/// before the first `init`; or dropped it and made it again since) is refused by name:
/// `CREATE TABLE IF NOT EXISTS` would keep it, and the grants only look at the owner's.
#[tokio::test]
async fn a_framework_table_of_another_owner_is_refused() {
    let test = TestDb::new().await;
    let other = format!("{}_other", test.roles.prefix());
    let admin = test.owner().await;
    admin
        .batch_execute(&format!(
            "CREATE ROLE {other} LOGIN; GRANT CREATE ON SCHEMA public TO {other};"
        ))
        .await
        .unwrap();
    as_role(&test, &other)
        .await
        .batch_execute("CREATE TABLE aac_tokens (forged TEXT)")
        .await
        .unwrap();
    let db = Database::connect(&test.url, test.roles.clone()).unwrap();
    let notes = ["CREATE TABLE notes (text TEXT NOT NULL);"];
    let err = db.migrate("notes", &notes).await.unwrap_err().to_string();
    assert!(
        err.contains(&format!("`aac_tokens` is owned by `{other}`"))
            && err.contains("defeats the level model"),
        "{err}"
    );
    // The user the URL logged in as is named, and the way out that keeps the trail
    // comes first (a URL naming another user is the common cause).
    let user = test
        .url
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split('@').next());
    assert!(
        err.contains(&format!("not by `{}`", user.unwrap()))
            && matches!(
                (err.find("do not drop anything"), err.find("drop this table")),
                (Some(keep), Some(drop)) if keep < drop
            ),
        "{err}"
    );
    admin.batch_execute("DROP TABLE aac_tokens").await.unwrap();
    db.migrate("notes", &notes).await.unwrap();
    // Replaced after `init`: refused when the server starts again.
    admin
        .batch_execute(&format!("ALTER TABLE aac_audit OWNER TO {other}"))
        .await
        .unwrap();
    for err in [
        db.migrate("notes", &notes).await.unwrap_err(),
        db.grant_levels().await.unwrap_err(),
    ] {
        let err = err.to_string();
        assert!(
            err.contains(&format!("`aac_audit` is owned by `{other}`")),
            "{err}"
        );
    }
    admin
        .batch_execute(&format!(
            "ALTER TABLE aac_audit OWNER TO CURRENT_USER; DROP OWNED BY {other}; DROP ROLE {other};"
        ))
        .await
        .unwrap();
    db.grant_levels().await.unwrap();
}

/// The messages of the warnings emitted on this thread while it is the default subscriber.
#[derive(Default, Clone)]
struct Warnings(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

struct Message<'a>(&'a mut String);

impl tracing::field::Visit for Message<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0.push_str(&format!("{value:?}"));
        }
    }
}

impl tracing::Subscriber for Warnings {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut message = String::new();
        event.record(&mut Message(&mut message));
        self.0.lock().unwrap().push(message);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// A database (and so, on PostgreSQL 15, `public`) owned by another role than the tables'
/// owner is named by the grants' warning: no grant stops that role from dropping or
/// replacing the framework's tables.
#[tokio::test]
async fn a_database_of_another_owner_is_warned_of() {
    let test = TestDb::new().await;
    let other = format!("{}_dbowner", test.roles.prefix());
    let admin = test.owner().await;
    admin
        .batch_execute(&format!(
            "CREATE ROLE {other} NOLOGIN; ALTER DATABASE {} OWNER TO {other}",
            test.name
        ))
        .await
        .unwrap();
    let warnings = Warnings::default();
    let guard = tracing::subscriber::set_default(warnings.clone());
    let db = Database::connect(&test.url, test.roles.clone()).unwrap();
    db.migrate("notes", &["CREATE TABLE notes (text TEXT NOT NULL);"])
        .await
        .unwrap();
    drop(guard);
    let said = warnings.0.lock().unwrap().clone();
    assert!(
        said.iter().any(|w| w.contains(&format!(
            "is owned by another role than the tables' owner ({other})"
        )) && w.contains("drop or replace the framework's tables")),
        "{said:?}"
    );
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {} OWNER TO CURRENT_USER; DROP ROLE {other}",
            test.name
        ))
        .await
        .unwrap();
}

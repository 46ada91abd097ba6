//! The database roles behind the three access levels, and the helper that creates them
//! and grants each exactly what its level allows.
//!
//! | role | logs in | may |
//! | --- | --- | --- |
//! | `<prefix>_read` | yes | `SELECT` on the application's tables; every session read-only |
//! | `<prefix>_write` | yes | `SELECT`, `INSERT`, `UPDATE`; no `DELETE`, no `TRUNCATE`, no schema change |
//! | `<prefix>_delete` | yes | `SELECT`, `INSERT`, `UPDATE`, `DELETE`, `TRUNCATE`; no schema change |
//! | `<prefix>_tokens` | yes | `SELECT`, `INSERT`, `UPDATE` on `aac_tokens` only |
//! | `<prefix>_audit` | yes | `SELECT`, `INSERT` on `aac_audit`; `SELECT`, `UPDATE` on `aac_audit_lock` (the chain's lock, a row it locks); `SELECT`, `INSERT`, `DELETE` on `aac_request_states` (the single-use ledger of 2026-07-28 confirmations) |
//!
//! Views of the `public` schema are `SELECT` only, to the three data roles: an
//! application's own window on a table (a view reads with its owner's rights).
//!
//! Each level logs in as its own role (a pool each), not `SET ROLE` on a shared
//! connection: raw SQL cannot `RESET ROLE` or `SET ROLE` its way to another level,
//! because the role it logged in as is a member of no other. None of them owns a table,
//! so none can `ALTER`, `DROP` or `CREATE` anything; `TEMPORARY` is revoked from
//! `PUBLIC` on the database so that no level creates temporary tables either. The
//! framework's tables (`aac_tokens`, `aac_audit`, `aac_audit_lock`, `aac_request_states`)
//! are out of reach of the data roles. The roles' own defaults (`ALTER ROLE … SET`, which
//! a role may run for itself) are reset at every grant.

use std::fmt;

/// The framework's own tables: never granted to the data roles.
pub(crate) const FRAMEWORK_TABLES: [&str; 5] = [
    "aac_tokens",
    "aac_audit",
    "aac_audit_lock",
    "aac_request_states",
    "aac_schema",
];

/// The names of the roles of one deployment: `<prefix>_read`, `<prefix>_write`,
/// `<prefix>_delete`, `<prefix>_tokens` and `<prefix>_audit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roles {
    prefix: String,
}

/// The default prefix: roles `aac_read`, `aac_write`, `aac_delete`, `aac_tokens`,
/// `aac_audit`.
pub const DEFAULT_ROLE_PREFIX: &str = "aac";

impl Default for Roles {
    fn default() -> Roles {
        Roles {
            prefix: DEFAULT_ROLE_PREFIX.to_owned(),
        }
    }
}

/// A role prefix that is not a plain lower-case identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadPrefix(String);

impl fmt::Display for BadPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "role prefix `{}` must be 1 to 40 characters of a-z, 0-9 and `_`, starting with a letter",
            self.0
        )
    }
}

impl std::error::Error for BadPrefix {}

impl Roles {
    /// The roles named after `prefix` (1 to 40 characters of `a-z`, `0-9`, `_`, starting
    /// with a letter: it is spliced into SQL as an identifier).
    pub fn new(prefix: &str) -> Result<Roles, BadPrefix> {
        let ok = !prefix.is_empty()
            && prefix.len() <= 40
            && prefix.starts_with(|c: char| c.is_ascii_lowercase())
            && prefix
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if ok {
            Ok(Roles {
                prefix: prefix.to_owned(),
            })
        } else {
            Err(BadPrefix(prefix.to_owned()))
        }
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The role `Read` transactions run as.
    pub fn read(&self) -> String {
        format!("{}_read", self.prefix)
    }

    /// The role `Write` transactions run as.
    pub fn write(&self) -> String {
        format!("{}_write", self.prefix)
    }

    /// The role `Delete` transactions run as.
    pub fn delete(&self) -> String {
        format!("{}_delete", self.prefix)
    }

    /// The role of the token store.
    pub fn tokens(&self) -> String {
        format!("{}_tokens", self.prefix)
    }

    /// The role of the audit sink.
    pub fn audit(&self) -> String {
        format!("{}_audit", self.prefix)
    }

    /// Every role, data roles first.
    pub fn all(&self) -> [String; 5] {
        [
            self.read(),
            self.write(),
            self.delete(),
            self.tokens(),
            self.audit(),
        ]
    }

    /// The SQL that creates the roles (if missing) and grants each its level on the
    /// tables that exist now, and `SELECT` on the views, in database `database`. Run as
    /// the tables' owner; run again after a migration that adds tables or views.
    ///
    /// `sequences` are the owner's sequences in `public` (its tables' `BIGSERIAL`s, and
    /// any it made): `USAGE, SELECT` to the write and delete roles; `foreign_sequences`,
    /// the other owners' there, from which the levels' roles are taken whatever an
    /// earlier release granted them (`ON ALL SEQUENCES`).
    pub(crate) fn grant_sql(
        &self,
        database: &str,
        tables: &[String],
        views: &[String],
        sequences: &[String],
        foreign_sequences: &[String],
    ) -> String {
        let [read, write, delete, tokens, audit] = self.all();
        let mut sql = String::new();
        for role in self.all() {
            sql.push_str(&format!(
                "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = '{role}'::name) THEN \
                 CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT; END IF; END $$;\n"
            ));
            sql.push_str(&format!("GRANT USAGE ON SCHEMA public TO {role};\n"));
        }
        // Every role may change its own defaults (`ALTER ROLE CURRENT_USER SET …`), and
        // a data role's tool could: they are reset, here and in this database, to what
        // the framework sets. (The pools do not depend on them: their settings are in
        // each connection's start-up packet, see `postgres::pinned`.)
        let database = quote_ident(database);
        for role in self.all() {
            sql.push_str(&format!(
                "ALTER ROLE {role} RESET ALL;\n\
                 ALTER ROLE {role} IN DATABASE {database} RESET ALL;\n"
            ));
        }
        sql.push_str(&format!(
            "ALTER ROLE {read} SET default_transaction_read_only = on;\n\
             REVOKE TEMPORARY ON DATABASE {database} FROM PUBLIC;\n"
        ));
        // The `aac_` prefix is the framework's: a table of that name it does not know (a
        // copy of `aac_tokens` or `aac_audit`, say) is nobody's data.
        let (reserved, data): (Vec<&String>, Vec<&String>) = tables
            .iter()
            .filter(|t| !FRAMEWORK_TABLES.contains(&t.as_str()))
            .partition(|t| t.starts_with("aac_"));
        for table in reserved {
            let t = quote_ident(table);
            sql.push_str(&format!(
                "REVOKE ALL ON {t} FROM PUBLIC, {read}, {write}, {delete}, {tokens}, {audit};\n"
            ));
        }
        for table in data {
            let t = quote_ident(table);
            sql.push_str(&format!(
                "REVOKE ALL ON {t} FROM {read}, {write}, {delete}, {tokens}, {audit};\n\
                 GRANT SELECT ON {t} TO {read};\n\
                 GRANT SELECT, INSERT, UPDATE ON {t} TO {write};\n\
                 GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON {t} TO {delete};\n"
            ));
        }
        // Views are read-only at every level, even the ones PostgreSQL could update
        // through: they are the application's windows on tables, such as its own window
        // on `aac_audit`.
        for view in views {
            let v = quote_ident(view);
            sql.push_str(&format!(
                "REVOKE ALL ON {v} FROM {read}, {write}, {delete}, {tokens}, {audit};\n\
                 GRANT SELECT ON {v} TO {read}, {write}, {delete};\n"
            ));
        }
        // Only the owner's sequences: in a database shared with another application, its
        // sequences keep the rights they have (a `nextval` of them by a level's role would
        // use up its numbers). A sequence named `aac_…` is the framework's prefix, as for
        // tables: nobody's data.
        for sequence in foreign_sequences.iter().chain(sequences) {
            let q = quote_ident(sequence);
            sql.push_str(&format!(
                "REVOKE ALL ON SEQUENCE {q} FROM {read}, {write}, {delete}, {tokens}, {audit};\n"
            ));
        }
        for sequence in sequences {
            let q = quote_ident(sequence);
            if !sequence.starts_with("aac_") {
                sql.push_str(&format!(
                    "GRANT USAGE, SELECT ON SEQUENCE {q} TO {write}, {delete};\n"
                ));
            }
        }
        if tables.iter().any(|t| t == "aac_tokens") {
            sql.push_str(&format!(
                "REVOKE ALL ON aac_tokens FROM PUBLIC, {read}, {write}, {delete}, {tokens}, {audit};\n\
                 GRANT SELECT, INSERT, UPDATE ON aac_tokens TO {tokens};\n"
            ));
        }
        if tables.iter().any(|t| t == "aac_audit") {
            sql.push_str(&format!(
                "REVOKE ALL ON aac_audit FROM PUBLIC, {read}, {write}, {delete}, {tokens}, {audit};\n\
                 GRANT SELECT, INSERT ON aac_audit TO {audit};\n"
            ));
        }
        // The chain's lock: a row only the audit role may lock (`FOR UPDATE` needs
        // `UPDATE`), and no other role may read, lock or wait on.
        if tables.iter().any(|t| t == "aac_audit_lock") {
            sql.push_str(&format!(
                "REVOKE ALL ON aac_audit_lock FROM PUBLIC, {read}, {write}, {delete}, {tokens}, {audit};\n\
                 GRANT SELECT, UPDATE ON aac_audit_lock TO {audit};\n"
            ));
        }
        if tables.iter().any(|t| t == "aac_request_states") {
            sql.push_str(&format!(
                "REVOKE ALL ON aac_request_states FROM PUBLIC, {read}, {write}, {delete}, {tokens}, {audit};\n\
                 GRANT SELECT, INSERT, DELETE ON aac_request_states TO {audit};\n"
            ));
        }
        if tables.iter().any(|t| t == "aac_schema") {
            sql.push_str(&format!(
                "REVOKE ALL ON aac_schema FROM PUBLIC, {read}, {write}, {delete}, {tokens}, {audit};\n\
                 GRANT SELECT ON aac_schema TO {read}, {write}, {delete}, {tokens}, {audit};\n"
            ));
        }
        sql
    }
}

/// `"name"`, with inner quotes doubled.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::Roles;

    #[test]
    fn prefixes_are_identifiers() {
        assert!(Roles::new("aac").is_ok());
        assert!(Roles::new("t_12_x").is_ok());
        for bad in ["", "1aac", "Aac", "a-b", "a;drop", "a b", &"a".repeat(41)] {
            assert!(Roles::new(bad).is_err(), "{bad:?}");
        }
        let roles = Roles::new("app").unwrap();
        assert_eq!(roles.read(), "app_read");
        assert_eq!(roles.audit(), "app_audit");
    }

    #[test]
    fn data_roles_never_reach_the_framework_tables() {
        let roles = Roles::default();
        let sql = roles.grant_sql(
            "db",
            &["notes".into(), "aac_audit".into()],
            &["usage".into()],
            &["notes_id_seq".into()],
            &["payroll_id_seq".into()],
        );
        assert!(sql.contains("GRANT SELECT, INSERT ON aac_audit TO aac_audit;"));
        assert!(!sql.contains("ON \"aac_audit\" TO aac_delete"));
        assert!(sql.contains("GRANT SELECT, INSERT, UPDATE ON \"notes\" TO aac_write;"));
        assert!(!sql.contains("DELETE ON \"notes\" TO aac_write"));
        // A view: SELECT at every data level, nothing more, nothing to the others.
        assert!(sql.contains("GRANT SELECT ON \"usage\" TO aac_read, aac_write, aac_delete;"));
        assert!(!sql.contains("INSERT ON \"usage\""));
        assert!(!sql.contains("\"usage\" TO aac_audit"));
        // The owner's sequences only; the levels' roles are taken from the others'.
        assert!(sql.contains(
            "GRANT USAGE, SELECT ON SEQUENCE \"notes_id_seq\" TO aac_write, aac_delete;"
        ));
        assert!(!sql.contains("ALL SEQUENCES"));
        assert!(!sql.contains("GRANT USAGE, SELECT ON SEQUENCE \"payroll_id_seq\""));
    }
}

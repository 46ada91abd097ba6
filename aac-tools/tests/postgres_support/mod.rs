//! A fresh PostgreSQL database and a fresh set of level roles per test, both named
//! uniquely, dropped when the value is dropped (even after a failed assertion).
//!
//! The server is `AAC_TEST_POSTGRES` (a connection string to an existing database as a
//! user that may create databases and roles), `postgres://postgres@127.0.0.1:5432/test`
//! by default.
#![allow(dead_code, unreachable_pub)]

use std::sync::atomic::{AtomicU32, Ordering};

use aac_tools::postgres::{Roles, tokio_postgres};

/// The administrative connection string.
pub fn admin_url() -> String {
    std::env::var("AAC_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// One database and its roles.
pub struct TestDb {
    /// The database's name (also the roles' prefix).
    pub name: String,
    /// `postgres://…/<name>`, as the admin user (the owner of the database).
    pub url: String,
    /// The roles of the levels.
    pub roles: Roles,
}

async fn admin() -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&admin_url(), tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {} is required: {e}", admin_url()));
    tokio::spawn(connection);
    client
}

impl TestDb {
    /// Create the database.
    pub async fn new() -> TestDb {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let mut random = [0u8; 4];
        getrandom_bytes(&mut random);
        let name = format!(
            "t{}x{}x{:08x}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            u32::from_le_bytes(random)
        );
        admin()
            .await
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        let mut config: tokio_postgres::Config = admin_url().parse().unwrap();
        config.dbname(&name);
        let user = config.get_user().unwrap_or("postgres").to_owned();
        let host = "127.0.0.1";
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let url = format!("postgres://{user}@{host}:{port}/{name}");
        TestDb {
            roles: Roles::new(&name).unwrap(),
            name,
            url,
        }
    }

    /// A connection to this database as its owner.
    pub async fn owner(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
    }

    /// The first column of every row `sql` returns, read as the owner.
    pub async fn column<T>(&self, sql: &str) -> Vec<T>
    where
        T: for<'a> tokio_postgres::types::FromSql<'a>,
    {
        self.owner()
            .await
            .query(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("`{sql}`: {e}"))
            .iter()
            .map(|row| row.get(0))
            .collect()
    }
}

fn getrandom_bytes(out: &mut [u8]) {
    // The nanoseconds of now, mixed: unique enough beside the pid and the counter.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    out.copy_from_slice(&nanos.to_le_bytes()[..out.len()]);
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        let roles = self.roles.all();
        // A runtime of its own on a thread of its own: drop runs inside the test's.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let admin = admin().await;
                let _ = admin
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await;
                for role in roles {
                    let _ = admin
                        .batch_execute(&format!("DROP ROLE IF EXISTS {role}"))
                        .await;
                }
            });
        })
        .join();
    }
}

/// A connection to the test's database as `role`, outside any pool.
pub async fn as_role(test: &TestDb, role: &str) -> tokio_postgres::Client {
    let mut config: tokio_postgres::Config = test.url.parse().unwrap();
    config.user(role);
    let (client, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

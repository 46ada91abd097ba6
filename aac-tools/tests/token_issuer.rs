//! The token store seam: the SQLite store issues, lists and revokes through
//! `TokenIssuer`, and what it issues is what its `TokenVerifier` accepts.
#![cfg(feature = "sqlite")]

use aac_tools::sqlite::{Database, TokenStore};
use aac_tools::tokens::TokenIssuer;

/// Any store, through the seam alone.
async fn issue_verify_revoke(store: &dyn TokenIssuer) {
    let created = store
        .create("alice", Some("demo"), &["notes:read", "notes:write"], None)
        .await
        .unwrap();
    let principal = store.verify(&created.token).await.unwrap();
    assert_eq!(principal.subject(), "alice");
    assert_eq!(principal.workspace(), Some("demo"));
    assert!(principal.has_scopes(&["notes:read", "notes:write"]));

    let listed = store.list().await.unwrap();
    let info = listed.iter().find(|t| t.id == created.id).unwrap();
    assert_eq!(info.revoked_at, None);
    assert!(
        !format!("{info:?}").contains(&created.token),
        "no secret in the list"
    );

    assert!(store.revoke(&created.id).await.unwrap());
    assert!(!store.revoke(&created.id).await.unwrap(), "already revoked");
    let refused = store.verify(&created.token).await.unwrap_err();
    assert_eq!(refused.reason(), "invalid_token");
    let listed = store.list().await.unwrap();
    assert!(
        listed
            .iter()
            .any(|t| t.id == created.id && t.revoked_at.is_some())
    );

    // An expired token is refused too.
    let short = store
        .create("bob", None, &["notes:read"], Some(-1))
        .await
        .unwrap();
    assert_eq!(
        store.verify(&short.token).await.unwrap_err().reason(),
        "invalid_token"
    );
}

#[tokio::test]
async fn the_sqlite_store_issues_what_it_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path().join("tokens.db")).unwrap();
    let store = TokenStore::open(&db).unwrap();
    issue_verify_revoke(&store).await;
}

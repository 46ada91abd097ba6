//! The demo data of `init --demo` and `serve --demo`: enough to try every rule by hand.
//!
//! - workspace `demo` (keys `AAC-…`): users `alice` (admin), `bob` (member), `carol`
//!   (viewer); agents `autopilot` and `triage-bot`; five issues, some with comments;
//! - workspace `other` (keys `OTH-…`): user `oscar` (admin) and one issue of its own.
//!
//! Seeding twice changes nothing: rows are added only where missing, and a workspace's
//! issues only when it has none.

use aac_tools::ToolError;

use crate::backend::WriteStore;

use crate::model::{Assignee, AssigneeKind, IssueStatus, Role};
use crate::queries::{
    IssueChanges, IssueFilter, ReadIssues, UpdateComments, UpdateDirectory, UpdateIssues,
};
use crate::transact;

/// The demo workspace.
pub const DEMO_WORKSPACE: &str = "demo";
/// The second workspace, whose issue the demo users must never see.
pub const OTHER_WORKSPACE: &str = "other";

struct DemoIssue {
    title: &'static str,
    body: &'static str,
    author: &'static str,
    closed: bool,
    assignee: Option<(&'static str, AssigneeKind)>,
    comments: &'static [(&'static str, &'static str)],
}

const DEMO_ISSUES: &[DemoIssue] = &[
    DemoIssue {
        title: "Login times out behind the corporate proxy",
        body: "Users behind the office proxy see a spinner for 30 s, then `504`. Direct connections work.",
        author: "alice",
        closed: false,
        assignee: Some(("bob", AssigneeKind::User)),
        comments: &[
            ("bob", "Reproduced with the proxy settings from the wiki."),
            (
                "alice",
                "The proxy strips `Connection: keep-alive`; worth checking the retry loop.",
            ),
        ],
    },
    DemoIssue {
        title: "CSV export drops the last row",
        body: "Exporting any report to CSV loses its final line when it has no trailing newline.",
        author: "bob",
        closed: false,
        assignee: Some(("triage-bot", AssigneeKind::Agent)),
        comments: &[("carol", "Seen on the March invoices too.")],
    },
    DemoIssue {
        title: "Rotate the staging database password",
        body: "Quarterly rotation.",
        author: "alice",
        closed: true,
        assignee: Some(("alice", AssigneeKind::User)),
        comments: &[],
    },
    DemoIssue {
        title: "Add dark mode to the dashboard",
        body: "Several users asked for it; follow the system setting by default.",
        author: "carol",
        closed: false,
        assignee: None,
        comments: &[],
    },
    DemoIssue {
        title: "Flaky test: sync_retries_on_timeout",
        body: "Fails about one run in twenty on CI.",
        author: "bob",
        closed: false,
        assignee: None,
        comments: &[("bob", "Probably the fixed sleep in the test.")],
    },
];

/// Add the demo workspaces, users, agents and issues where missing, in one transaction
/// (on either backend).
pub async fn seed_demo(store: &WriteStore) -> Result<(), ToolError> {
    transact!(store, |tx| {
        tx.ensure_workspace(DEMO_WORKSPACE, "AAC").await?;
        tx.ensure_user(DEMO_WORKSPACE, "alice", Role::Admin).await?;
        tx.ensure_user(DEMO_WORKSPACE, "bob", Role::Member).await?;
        tx.ensure_user(DEMO_WORKSPACE, "carol", Role::Viewer)
            .await?;
        tx.ensure_agent(
            DEMO_WORKSPACE,
            "autopilot",
            "Works an issue end to end and opens a fix.",
        )
        .await?;
        tx.ensure_agent(
            DEMO_WORKSPACE,
            "triage-bot",
            "Labels, deduplicates and reproduces new issues.",
        )
        .await?;
        tx.ensure_workspace(OTHER_WORKSPACE, "OTH").await?;
        tx.ensure_user(OTHER_WORKSPACE, "oscar", Role::Admin)
            .await?;
        tx.ensure_agent(
            OTHER_WORKSPACE,
            "autopilot",
            "Works an issue end to end and opens a fix.",
        )
        .await?;

        if !has_issues(tx, DEMO_WORKSPACE).await? {
            for demo in DEMO_ISSUES {
                let issue = tx
                    .create_issue(DEMO_WORKSPACE, demo.author, demo.title, demo.body)
                    .await?;
                if demo.closed {
                    let changes = IssueChanges {
                        status: Some(IssueStatus::Closed),
                        ..IssueChanges::default()
                    };
                    tx.update_issue(&issue, &changes).await?;
                }
                if let Some((name, kind)) = demo.assignee {
                    let assignee = Assignee {
                        name: name.to_owned(),
                        kind,
                    };
                    tx.assign_issue(&issue, &assignee).await?;
                }
                for (author, body) in demo.comments {
                    tx.add_comment(&issue.id, author, body).await?;
                }
            }
        }
        if !has_issues(tx, OTHER_WORKSPACE).await? {
            tx.create_issue(
                OTHER_WORKSPACE,
                "oscar",
                "Quarterly access review",
                "Only people in `other` may see this issue.",
            )
            .await?;
        }
        Ok(())
    })
}

async fn has_issues(tx: &impl ReadIssues, workspace: &str) -> Result<bool, ToolError> {
    let filter = IssueFilter {
        status: None,
        assignee: None,
        before: None,
        limit: 1,
    };
    Ok(!tx.list_issues(workspace, &filter).await?.0.is_empty())
}

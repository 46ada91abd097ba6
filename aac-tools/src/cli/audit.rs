//! `audit`: the records, a summary, or the chain's check.

use super::args::AuditArgs;
use super::{CliContext, CliError, OpenMode, output_failed, print_out};
use std::io::Write;

use crate::audit::sqlite::verify_checkpoints_of;
use crate::audit::{
    AuditCommand, AuditError, AuditQuery, ChainReport, CheckpointKey, CheckpointReport, Outcome,
    verify_chain,
};

/// The `audit` command its flags describe.
pub(super) fn command(args: &AuditArgs) -> Result<AuditCommand, CliError> {
    let failed = |e: AuditError| CliError::new(e.to_string());
    let mut query = AuditQuery::new();
    if let Some(tool) = args.tool.clone() {
        query = query.tool(tool);
    }
    if let Some(kind) = args.kind.as_deref() {
        query = query.kind(kind.parse().map_err(CliError::new)?);
    }
    if let Some(outcome) = args.outcome.as_deref() {
        query = query.outcome(match outcome {
            "success" => Outcome::Success,
            "denied" => Outcome::Denied,
            _ => Outcome::Error,
        });
    }
    if let Some(reason) = args.reason.clone() {
        query = query.reason(reason);
    }
    if let Some(principal) = args.principal.clone() {
        query = query.principal(principal);
    }
    if let Some(workspace) = args.workspace.clone() {
        query = query.workspace(workspace);
    }
    // Every age counted back from one instant, which the query's bounds and their check
    // share: each resolved on its own, `--since 1h --until 1h` was a window of the few
    // microseconds between them, where the same two dates are refused.
    let now = time::OffsetDateTime::now_utc();
    let resolve = |text: &str| crate::audit::parse_time_at(text, now).map_err(failed);
    if let Some(since) = args.since.as_deref() {
        query = query.since(&resolve(since)?).map_err(failed)?;
    }
    if let Some(until) = args.until.as_deref() {
        query = query.until(&resolve(until)?).map_err(failed)?;
    }
    if let (Some(since), Some(until)) = (args.since.as_deref(), args.until.as_deref())
        && resolve(since)? >= resolve(until)?
    {
        return Err(CliError::new(format!(
            "--since `{since}` is not before --until `{until}`: no record can match; \
             swap them, or drop one"
        )));
    }
    if let Some(limit) = args.limit {
        query = query.limit(usize::try_from(limit).unwrap_or(usize::MAX));
    }
    Ok(AuditCommand {
        query,
        json: args.json,
        stats: args.stats,
        verify: args.verify,
    })
}

pub(super) fn audit(context: &CliContext, args: AuditArgs) -> Result<(), CliError> {
    if args.new_checkpoint_key {
        let key = CheckpointKey::generate().map_err(|e| CliError::new(e.to_string()))?;
        print_out(format_args!("{}\n", key.secret_hex()))?;
        context.note(format_args!(
            "a new checkpoint key: keep the secret above out of the database (AAC_CHECKPOINT_KEY \
             for `serve --checkpoints FILE`); verify with --public-key {}",
            key.public_hex()
        ));
        return Ok(());
    }
    // (clap's `requires` takes a flag's default for its presence: checked here.)
    if args.checkpoints.is_some() && !args.verify {
        return Err(CliError::new(
            "--checkpoints checks a chain: it needs --verify, and no listing flag (--stats, \
             --limit, --since, --tool…)",
        ));
    }
    let failed = |e: AuditError| CliError::new(e.to_string());
    let command = command(&args)?;
    // Checks the file is the application's before reading it, and writes nothing: a
    // trail that is missing (every database the command line creates has one) or of
    // other columns is reported by the command, never created or migrated.
    drop(context.open_db(OpenMode::Read)?);
    let conn = crate::audit::open_reader(context.db_path()).map_err(failed)?;
    let mut out = std::io::stdout().lock();
    match (&args.checkpoints, &args.public_key) {
        (Some(file), Some(public)) => {
            verify_with_checkpoints(&conn, file, public, args.json, &mut out)?;
        }
        _ => command.run(&conn, &mut out).map_err(failed)?,
    }
    out.flush().map_err(|e| output_failed(&e))
}

/// `--verify --checkpoints FILE --public-key KEY`: the chain's report and the
/// checkpoints', as text (a line each) or as one JSON object (the chain's report, with
/// the checkpoints' under `checkpoints`); then every problem found, in one line.
fn verify_with_checkpoints(
    conn: &rusqlite::Connection,
    file: &std::path::Path,
    public: &str,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    #[derive(serde::Serialize)]
    struct Verified<'a> {
        #[serde(flatten)]
        chain: &'a ChainReport,
        checkpoints: &'a CheckpointReport,
    }
    let failed = |e: AuditError| CliError::new(e.to_string());
    let chain = verify_chain(conn).map_err(failed)?;
    let checkpoints = verify_checkpoints_of(conn, file, public, &chain).map_err(failed)?;
    if json {
        let both = Verified {
            chain: &chain,
            checkpoints: &checkpoints,
        };
        writeln!(out, "{}", crate::audit::json_text(&both))
    } else {
        writeln!(out, "{chain}\n{checkpoints}")
    }
    .map_err(|e| output_failed(&e))?;
    let mut problems = chain.problems();
    if let Some(problem) = checkpoints.problem {
        problems.push(format!("the audit checkpoints do not hold: {problem}"));
    }
    crate::audit::verdict(problems).map_err(failed)
}

use aac_tools::ToolError;

/// The level is the trait's name, not an argument.
#[aac_tools::queries(delete)]
pub trait PurgeNotes {
    fn purge(&self) -> Result<usize, ToolError>;
}

fn main() {}

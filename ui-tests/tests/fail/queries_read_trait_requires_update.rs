use aac_tools::ToolError;
use aac_tools::access::MayUpdate;

/// Named for reading, but one method writes.
#[aac_tools::queries]
pub trait ReadNotes {
    fn count_notes(&self) -> Result<i64, ToolError>;
    fn touch_note(&self, id: i64) -> Result<(), ToolError>
    where
        Self: MayUpdate;
}

fn main() {}

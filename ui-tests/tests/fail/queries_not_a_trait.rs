/// Not a trait.
#[aac_tools::queries]
pub struct DeleteNotes;

fn main() {}

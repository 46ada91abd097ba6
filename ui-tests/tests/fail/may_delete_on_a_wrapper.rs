use aac_tools::access::{MayDelete, MayUpdate, Read};
use aac_tools::sqlite::Tx;

/// A wrapper of a read transaction that claims the right to update and delete.
struct Claim<'a, 'b>(&'a Tx<'b, Read>);

impl MayUpdate for Claim<'_, '_> {}
impl MayDelete for Claim<'_, '_> {}

fn main() {}

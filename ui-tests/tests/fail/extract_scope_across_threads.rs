//! The scope the macros enter while a tool runs cannot be made on another thread and
//! dropped on the tool's: that would put the other thread's "no tool running" on it.
use aac_tools::access::AccessLevel;

fn main() {
    let scope = std::thread::spawn(|| aac_tools::__private0::ExtractScope::enter(AccessLevel::Delete))
        .join()
        .unwrap();
    drop(scope);
}

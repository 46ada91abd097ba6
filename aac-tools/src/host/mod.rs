//! The host side: may a tool run without asking, and may a failed call be retried?

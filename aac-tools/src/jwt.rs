//! JWT access tokens, beside the opaque tokens of the store.

//! Collects every error of one item so that they are all reported in one pass.

/// A bag of errors, turned into one `compile_error!` list by [`Errors::finish`].
///
/// Like serde's `Ctxt`, it panics when dropped unchecked, so that no code path can
/// forget errors it collected.
#[derive(Default)]
pub(crate) struct Errors {
    errors: Option<syn::Error>,
    checked: bool,
}

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.errors {
            Some(errors) => errors.combine(error),
            None => self.errors = Some(error),
        }
    }

    /// `Err` with every error collected, or `Ok` when there were none.
    pub(crate) fn finish(mut self) -> syn::Result<()> {
        self.checked = true;
        match self.errors.take() {
            Some(errors) => Err(errors),
            None => Ok(()),
        }
    }
}

impl Drop for Errors {
    fn drop(&mut self) {
        if !self.checked && !std::thread::panicking() {
            panic!("aac-tools-macros: errors collected but never reported");
        }
    }
}

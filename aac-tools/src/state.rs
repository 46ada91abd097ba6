//! Shared state handed to tools by type, as `State<T>`.

use std::any::{Any, TypeId, type_name};
use std::collections::HashMap;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use crate::error::ToolError;

/// Values of any type, one per type, shared by every call.
#[derive(Clone, Default)]
pub struct StateMap {
    values: Arc<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

/// The key under which the framework's own storage handles are kept: a private type, so
/// that no `State<T>` (nor [`StateMap::get`]) finds them.
struct Framework<T>(std::marker::PhantomData<T>);

/// Whether `T` is one of the framework's storage handles, which tools reach only at their
/// level (as a data handle parameter), never as shared state.
fn is_framework_storage<T: 'static>() -> bool {
    #[allow(unused_mut)]
    let mut framework: Vec<TypeId> = Vec::new();
    #[cfg(feature = "sqlite")]
    {
        use crate::access::{Delete, Read, Write};
        use crate::sqlite::{Database, Db, TokenStore};
        framework.extend([
            TypeId::of::<Database>(),
            TypeId::of::<TokenStore>(),
            TypeId::of::<Db<Read>>(),
            TypeId::of::<Db<Write>>(),
            TypeId::of::<Db<Delete>>(),
        ]);
    }
    #[cfg(feature = "postgres")]
    {
        use crate::access::{Delete, Read, Write};
        use crate::postgres::{Database, Db, TokenStore};
        framework.extend([
            TypeId::of::<Database>(),
            TypeId::of::<TokenStore>(),
            TypeId::of::<Db<Read>>(),
            TypeId::of::<Db<Write>>(),
            TypeId::of::<Db<Delete>>(),
        ]);
    }
    framework.contains(&TypeId::of::<T>())
}

/// The framework storage handle named inside `T`'s type, when `T` is not one itself but
/// wraps one (`Arc<Database>`, `Option<Db<Delete>>`, `(Db<Delete>,)`, …): shared state
/// through which a tool would reach the database past its level. Read from the type's
/// name, so any generic wrapper is seen; a struct of the application's own that holds a
/// handle has a name of its own and is not.
pub(crate) fn framework_storage_inside<T: 'static>() -> Option<&'static str> {
    if is_framework_storage::<T>() {
        return None;
    }
    #[allow(unused_mut)]
    let mut names: Vec<&'static str> = Vec::new();
    #[cfg(feature = "sqlite")]
    names.extend([
        std::any::type_name::<crate::sqlite::Database>(),
        std::any::type_name::<crate::sqlite::TokenStore>(),
        generic_name(std::any::type_name::<crate::sqlite::Db<crate::access::Read>>()),
    ]);
    #[cfg(feature = "postgres")]
    names.extend([
        std::any::type_name::<crate::postgres::Database>(),
        std::any::type_name::<crate::postgres::TokenStore>(),
        generic_name(std::any::type_name::<
            crate::postgres::Db<crate::access::Read>,
        >()),
    ]);
    let held = std::any::type_name::<T>();
    names.into_iter().find(|name| names_type(held, name))
}

/// `a::Db` of `a::Db<b::Read>`.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn generic_name(name: &'static str) -> &'static str {
    name.split('<').next().unwrap_or(name)
}

/// Whether the type name `held` names the type `name` (a whole path, not the start of a
/// longer identifier).
fn names_type(held: &str, name: &str) -> bool {
    held.match_indices(name).any(|(at, _)| {
        let before = held[..at].chars().next_back();
        let after = held[at + name.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
    })
}

impl StateMap {
    /// Keep `value` for `State<T>`; a framework storage handle (the `Database`…) is kept
    /// under a private key instead, for the data handles only.
    pub(crate) fn insert<T: Send + Sync + 'static>(&mut self, value: Arc<T>) {
        let key = if is_framework_storage::<T>() {
            TypeId::of::<Framework<T>>()
        } else {
            TypeId::of::<T>()
        };
        Arc::make_mut(&mut self.values).insert(key, value);
    }

    /// The framework storage handle of type `T`, if one was registered.
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
    pub(crate) fn framework<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        self.values
            .get(&TypeId::of::<Framework<T>>())
            .and_then(|v| Arc::clone(v).downcast::<T>().ok())
    }

    /// The value of type `T`, if one was registered (never one of the framework's storage
    /// handles, such as the `Database`: tools reach those at their level only).
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        self.values
            .get(&TypeId::of::<T>())
            .and_then(|v| Arc::clone(v).downcast::<T>().ok())
    }

    /// The value of type `T`, or a 500 naming the missing registration.
    pub fn require<T: Send + Sync + 'static>(&self) -> Result<Arc<T>, ToolError> {
        self.get::<T>().ok_or_else(|| {
            ToolError::internal(format!(
                "no shared state of type `{}`: register it with `ServerBuilder::state`",
                type_name::<T>()
            ))
        })
    }
}

/// What one parameter of a tool, resource or prompt needs registered with
/// [`ServerBuilder::state`](crate::ServerBuilder::state) for its calls to run: the server
/// warns at start-up when it is missing, rather than at each call's 500. Not public API.
#[doc(hidden)]
#[derive(Clone, Copy)]
#[allow(missing_debug_implementations)]
pub struct StateNeed {
    /// What the parameter is, as the warning names it (`` `State<app::Greeting>` ``).
    pub what: fn() -> String,
    /// Whether `map` holds it.
    pub present: fn(&StateMap) -> bool,
}

impl StateNeed {
    /// The need of a `State<T>`.
    pub const fn state<T: Send + Sync + 'static>() -> StateNeed {
        fn what<T>() -> String {
            format!("`State<{}>`", type_name::<T>())
        }
        fn present<T: Send + Sync + 'static>(map: &StateMap) -> bool {
            map.get::<T>().is_some()
        }
        StateNeed {
            what: what::<T>,
            present: present::<T>,
        }
    }

    /// The need of a data handle `Db<L>` on the framework's database `D`.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub(crate) const fn data_handle<D: Send + Sync + 'static, L: 'static>() -> StateNeed {
        fn what<L>() -> String {
            let level = type_name::<L>().rsplit("::").next().unwrap_or_default();
            format!("`Db<{level}>` (a handle on the `Database`)")
        }
        fn present<D: Send + Sync + 'static>(map: &StateMap) -> bool {
            map.framework::<D>().is_some()
        }
        StateNeed {
            what: what::<L>,
            present: present::<D>,
        }
    }

    /// What the parameters of an item (`own`) and of its completion function need.
    pub(crate) fn of_item(
        own: &'static [Option<StateNeed>],
        complete: Option<fn() -> &'static [Option<StateNeed>]>,
    ) -> impl Iterator<Item = StateNeed> {
        let complete = complete.map(|f| f()).unwrap_or_default();
        own.iter().chain(complete).flatten().copied()
    }
}

impl fmt::Debug for StateMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateMap")
            .field("len", &self.values.len())
            .finish()
    }
}

/// A tool parameter giving shared state registered with
/// [`ServerBuilder::state`](crate::ServerBuilder::state).
///
/// ```
/// use aac_tools::{mcp_tool, State, Text, ToolError};
///
/// struct Greeting {
///     text: String,
/// }
///
/// /// Say hello.
/// #[mcp_tool(read_only, scope = "greetings:read")]
/// async fn hello(greeting: State<Greeting>) -> Result<Text, ToolError> {
///     Ok(Text(greeting.text.clone()))
/// }
/// ```
pub struct State<T>(pub Arc<T>);

impl<T> Deref for State<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> Clone for State<T> {
    fn clone(&self) -> Self {
        State(Arc::clone(&self.0))
    }
}

impl<T: fmt::Debug> fmt::Debug for State<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

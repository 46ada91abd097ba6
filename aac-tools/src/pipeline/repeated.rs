//! Keys repeated in one JSON object, which readers disagree on (the first or the last
//! wins): the arguments of a call, an answer to a question, a JWT's header and claims.

use std::borrow::Cow;

/// The JSON pointer of the first key that appears twice in one object of `json`, at any
/// depth, if there is one. With repeated keys, JSON says nothing for sure: this server
/// reads the last one, another reader (a host, a proxy, a policy) may read the first, so
/// a call whose arguments repeat a key is refused rather than guessed at. JSON that does
/// not parse has none (it is refused for that).
pub(crate) fn repeated_key(json: &[u8]) -> Option<String> {
    find_repeated_key(json, true)
}

/// Whether some object of `json` may repeat a key, told by a scan of its bytes: `false`
/// means none does (then [`repeated_key`] is `None` without reading it).
#[cfg(feature = "mcp")]
pub(crate) fn may_repeat_a_key(json: &[u8]) -> bool {
    !keys_all_differ(json)
}

/// [`repeated_key`]; with `pointer` false, an empty pointer once a repeat is found.
fn find_repeated_key(json: &[u8], pointer: bool) -> Option<String> {
    use serde::de::{DeserializeSeed, Deserializer, Error, MapAccess, SeqAccess, Visitor};

    if keys_all_differ(json) {
        return None;
    }

    /// One walk of the JSON: the first without a path (nothing allocated but each
    /// object's keys, borrowed where they need no unescaping), the second, only when a
    /// key repeats, with the path to it.
    struct Walk<'p> {
        /// `Some` on the walk that looks for the path.
        path: Option<&'p mut Vec<String>>,
        found: &'p mut bool,
    }

    impl Walk<'_> {
        fn inner(&mut self) -> Walk<'_> {
            Walk {
                path: self.path.as_deref_mut(),
                found: self.found,
            }
        }
        fn push(&mut self, segment: impl FnOnce() -> String) {
            if let Some(path) = self.path.as_deref_mut() {
                path.push(segment());
            }
        }
        fn pop(&mut self) {
            if let Some(path) = self.path.as_deref_mut() {
                path.pop();
            }
        }
    }

    impl<'de> DeserializeSeed<'de> for Walk<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
            deserializer.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Walk<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
            for index in 0usize.. {
                self.push(|| index.to_string());
                let more = seq.next_element_seed(self.inner())?;
                self.pop();
                if more.is_none() {
                    break;
                }
            }
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
            // Hashed, not a list searched per key: an object of a million distinct keys
            // (a 16 MiB line) costs a million lookups, not half a trillion comparisons.
            let mut keys: std::collections::HashSet<Cow<'de, str>> =
                std::collections::HashSet::new();
            while let Some(key) = map.next_key::<Key<'de>>()? {
                if keys.contains(&key.0) {
                    self.push(|| key.0.into_owned());
                    *self.found = true;
                    // Nothing more to learn: stop reading.
                    return Err(A::Error::custom("a repeated key"));
                }
                self.push(|| key.0.to_string());
                keys.insert(key.0);
                map.next_value_seed(self.inner())?;
                self.pop();
            }
            Ok(())
        }
    }

    /// An object's key, borrowed when it can be.
    struct Key<'de>(Cow<'de, str>);

    impl<'de> serde::Deserialize<'de> for Key<'de> {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct KeyVisitor;
            impl<'de> Visitor<'de> for KeyVisitor {
                type Value = Key<'de>;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a key")
                }
                fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Key<'de>, E> {
                    Ok(Key(Cow::Borrowed(key)))
                }
                fn visit_str<E>(self, key: &str) -> Result<Key<'de>, E> {
                    Ok(Key(Cow::Owned(key.to_owned())))
                }
            }
            deserializer.deserialize_str(KeyVisitor)
        }
    }

    let walk = |path: Option<&mut Vec<String>>| {
        let mut found = false;
        let mut deserializer = serde_json::Deserializer::from_slice(json);
        let _ = Walk {
            path,
            found: &mut found,
        }
        .deserialize(&mut deserializer);
        found
    };
    if !walk(None) {
        return None;
    }
    if !pointer {
        return Some(String::new());
    }
    let mut path = Vec::new();
    walk(Some(&mut path));
    Some(
        path.iter()
            .map(|p| format!("/{}", p.replace('~', "~0").replace('/', "~1")))
            .collect(),
    )
}

/// Whether every key of `json`, in all its objects together, is written differently
/// from every other and without an escape: then no object repeats a key, and
/// [`repeated_key`] need not read it. The common case, told in one pass over the bytes
/// without allocating; `false` (read it) past 32 keys, for an escaped key, or when two
/// keys are the same, even in different objects.
pub(crate) fn keys_all_differ(json: &[u8]) -> bool {
    let mut keys: [&[u8]; 32] = [&[]; 32];
    let mut count = 0;
    let mut i = 0;
    while i < json.len() {
        if json[i] != b'"' {
            i += 1;
            continue;
        }
        let start = i + 1;
        let mut escaped = false;
        i = start;
        while i < json.len() && json[i] != b'"' {
            if json[i] == b'\\' {
                escaped = true;
                i += 1;
            }
            i += 1;
        }
        let end = i.min(json.len());
        i += 1;
        let next = json
            .get(i..)
            .and_then(|rest| rest.iter().find(|b| !b.is_ascii_whitespace()));
        if next != Some(&b':') {
            continue;
        }
        let key = &json[start..end];
        if escaped || count == keys.len() || keys[..count].contains(&key) {
            return false;
        }
        keys[count] = key;
        count += 1;
    }
    true
}

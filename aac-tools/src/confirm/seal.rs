//! The sealed `requestState` of a 2026-07-28 confirmation: HMAC-SHA256 over what the
//! state binds (a fresh nonce, the principal, the tool, a digest of the arguments and an
//! expiry), signed with the first configured key and verified with any of them, so keys
//! can be rotated without refusing states already handed out.
//!
//! Wire form: `v1.<hex of the payload JSON>.<hex of the tag>`. The payload is readable
//! by anyone (integrity, not confidentiality): it holds no secret.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The longest `requestState` opened: anything longer is refused unread.
pub(crate) const MAX_STATE_BYTES: usize = 4096;

/// Domain separation of the tag: a tag made for something else never verifies here.
const CONTEXT: &[u8] = b"aac-tools confirm requestState v1\n";

/// What a state binds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Claims {
    /// A random nonce: the state's identity in the single-use ledger.
    pub(crate) n: String,
    /// The principal: the JSON text of the array of subject and workspace (`null` when
    /// none), which no two principals share.
    pub(crate) p: String,
    /// The tool.
    pub(crate) t: String,
    /// SHA-256 (hex) of the arguments' canonical JSON, `confirm` left out.
    pub(crate) d: String,
    /// Expiry, seconds since the Unix epoch.
    pub(crate) e: i64,
}

/// Why a state was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Broken {
    Malformed,
    Forged,
    Expired,
    OtherPrincipal,
    OtherTool,
    OtherArguments,
}

impl Broken {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Broken::Malformed => "the requestState is not one this server issued",
            Broken::Forged => {
                "the requestState's seal does not verify (altered or forged, or sealed by a \
                 replica with other keys: replicas must share their request-state keys)"
            }
            Broken::Expired => "the requestState has expired; call the tool again",
            Broken::OtherPrincipal => "the requestState was issued to another principal",
            Broken::OtherTool => "the requestState was issued for another tool",
            Broken::OtherArguments => {
                "the requestState was issued for other arguments; call the tool again"
            }
        }
    }
}

/// The keys: sign with the first, verify with any.
#[derive(Clone)]
pub(crate) struct Sealer {
    keys: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sealer({} keys)", self.keys.len())
    }
}

impl Sealer {
    /// At least one key, each at least 32 bytes (checked by the builder).
    pub(crate) fn new(keys: Vec<Vec<u8>>) -> Sealer {
        Sealer { keys }
    }

    pub(crate) fn seal(&self, claims: &Claims) -> String {
        let payload = serde_json::to_vec(claims).unwrap_or_default();
        let tag = hmac_sha256(&self.keys[0], &[CONTEXT, &payload]);
        format!("v1.{}.{}", hex(&payload), hex(&tag))
    }

    /// The claims of a state this server sealed, checked against the call it comes back
    /// with (`now` in seconds since the epoch).
    pub(crate) fn open(
        &self,
        state: &str,
        principal: &str,
        tool: &str,
        digest: &str,
        now: i64,
    ) -> Result<Claims, Broken> {
        if state.len() > MAX_STATE_BYTES {
            return Err(Broken::Malformed);
        }
        let mut parts = state.split('.');
        let (Some("v1"), Some(payload), Some(tag), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Broken::Malformed);
        };
        // Only the form this server writes (lowercase hex): a state is one string, and
        // no other spelling of it is the state it issued.
        let lowercase = |text: &str| !text.bytes().any(|b| b.is_ascii_uppercase());
        if !lowercase(payload) || !lowercase(tag) {
            return Err(Broken::Malformed);
        }
        let payload = unhex(payload).ok_or(Broken::Malformed)?;
        let tag = unhex(tag).ok_or(Broken::Malformed)?;
        let verified = self.keys.iter().any(|key| {
            let expected = hmac_sha256(key, &[CONTEXT, &payload]);
            bool::from(expected.as_slice().ct_eq(&tag))
        });
        if !verified {
            return Err(Broken::Forged);
        }
        let claims: Claims = serde_json::from_slice(&payload).map_err(|_| Broken::Malformed)?;
        if claims.e <= now {
            return Err(Broken::Expired);
        }
        if claims.p != principal {
            return Err(Broken::OtherPrincipal);
        }
        if claims.t != tool {
            return Err(Broken::OtherTool);
        }
        if claims.d != digest {
            return Err(Broken::OtherArguments);
        }
        Ok(claims)
    }
}

/// The digest a state binds: SHA-256 of the arguments' canonical JSON (object keys
/// sorted at every depth), the framework's `confirm` left out.
pub(crate) fn arguments_digest(arguments: Option<&Value>) -> String {
    let mut text = String::new();
    match arguments {
        Some(Value::Object(map)) => {
            let mut without = map.clone();
            without.remove("confirm");
            canonical(&Value::Object(without), &mut text);
        }
        Some(other) => canonical(other, &mut text),
        None => text.push_str("null"),
    }
    hex(&Sha256::digest(text.as_bytes()))
}

fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// HMAC-SHA256 (RFC 2104) of the concatenation of `parts`.
pub(crate) fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(block.map(|b| b ^ 0x36));
    for part in parts {
        inner.update(part);
    }
    let inner = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(block.map(|b| b ^ 0x5c));
    outer.update(inner);
    outer.finalize().into()
}

use crate::hex::decode as unhex;
pub(crate) use crate::hex::encode as hex;

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// RFC 4231, test cases 1 and 6 (a key longer than the block).
    #[test]
    fn hmac_matches_rfc_4231() {
        let tag = hmac_sha256(&[0x0b; 20], &[b"Hi There"]);
        assert_eq!(
            hex(&tag),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        let tag = hmac_sha256(
            &[0xaa; 131],
            &[b"Test Using Larger Than Block-Size Key - Hash Key First"],
        );
        assert_eq!(
            hex(&tag),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    fn claims() -> Claims {
        Claims {
            n: "00ff".to_owned(),
            p: "alice\ndemo".to_owned(),
            t: "delete_issue".to_owned(),
            d: arguments_digest(Some(&json!({"issue_id": "AAC-5"}))),
            e: 1_000,
        }
    }

    fn sealer(key: u8) -> Sealer {
        Sealer::new(vec![vec![key; 32]])
    }

    #[test]
    fn a_state_opens_only_for_its_own_call() {
        let c = claims();
        let state = sealer(1).seal(&c);
        let open = |s: &Sealer, p: &str, t: &str, d: &str, now| s.open(&state, p, t, d, now);
        assert_eq!(open(&sealer(1), &c.p, &c.t, &c.d, 999), Ok(c.clone()));
        assert_eq!(open(&sealer(2), &c.p, &c.t, &c.d, 999), Err(Broken::Forged));
        assert_eq!(
            open(&sealer(1), &c.p, &c.t, &c.d, 1_000),
            Err(Broken::Expired)
        );
        assert_eq!(
            open(&sealer(1), "mallory\ndemo", &c.t, &c.d, 999),
            Err(Broken::OtherPrincipal)
        );
        assert_eq!(
            open(&sealer(1), &c.p, "delete_comment", &c.d, 999),
            Err(Broken::OtherTool)
        );
        let other = arguments_digest(Some(&json!({"issue_id": "AAC-6"})));
        assert_eq!(
            open(&sealer(1), &c.p, &c.t, &other, 999),
            Err(Broken::OtherArguments)
        );
    }

    #[test]
    fn an_altered_state_is_forged_and_rotation_verifies_old_keys() {
        let c = claims();
        let state = sealer(1).seal(&c);
        // Move the expiry forward by editing the payload: the tag no longer matches.
        let mut later = c.clone();
        later.e = 9_999;
        let forged_payload = sealer(9).seal(&later);
        let payload = forged_payload.split('.').nth(1).unwrap();
        let tag = state.split('.').nth(2).unwrap();
        let altered = format!("v1.{payload}.{tag}");
        assert_eq!(
            sealer(1).open(&altered, &c.p, &c.t, &c.d, 999),
            Err(Broken::Forged)
        );
        assert_eq!(
            sealer(1).open("v2.00.00", &c.p, &c.t, &c.d, 999),
            Err(Broken::Malformed)
        );
        // The same bytes spelled in uppercase hex are not the state issued.
        let (payload, tag) = (
            state.split('.').nth(1).unwrap(),
            state.split('.').nth(2).unwrap(),
        );
        for respelled in [
            format!("v1.{}.{tag}", payload.to_ascii_uppercase()),
            format!("v1.{payload}.{}", tag.to_ascii_uppercase()),
        ] {
            assert!(respelled != state, "the state has letters to respell");
            assert_eq!(
                sealer(1).open(&respelled, &c.p, &c.t, &c.d, 999),
                Err(Broken::Malformed)
            );
        }
        // Rotation: the new key signs, the old one still verifies.
        let rotated = Sealer::new(vec![vec![2; 32], vec![1; 32]]);
        assert_eq!(rotated.open(&state, &c.p, &c.t, &c.d, 999), Ok(c.clone()));
        assert!(rotated.seal(&c) != state);
    }

    #[test]
    fn the_digest_ignores_key_order_and_confirm() {
        let a = arguments_digest(Some(&json!({"a": 1, "b": {"y": 2, "x": [1, "z"]}})));
        let b = arguments_digest(Some(
            &json!({"confirm": true, "b": {"x": [1, "z"], "y": 2}, "a": 1}),
        ));
        assert_eq!(a, b);
        assert!(a != arguments_digest(Some(&json!({"a": 2, "b": {"y": 2, "x": [1, "z"]}}))));
    }
}

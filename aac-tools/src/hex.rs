//! Lowercase hexadecimal, written once for tokens, sealed request states and checkpoints.

/// `bytes` as lowercase hex.
pub(crate) fn encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

/// The bytes of hex text (either case); `None` for an odd length or a non-hex character.
pub(crate) fn decode(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    text.as_bytes()
        .chunks(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trips_and_refuses_what_is_not_hex() {
        let bytes = [0x00, 0x0f, 0xa5, 0xff];
        assert_eq!(super::encode(&bytes), "000fa5ff");
        assert_eq!(super::decode("000fa5ff").unwrap(), bytes);
        assert_eq!(super::decode("000FA5FF").unwrap(), bytes);
        assert_eq!(super::decode("abc"), None);
        assert_eq!(super::decode("zz"), None);
        assert_eq!(super::decode("+1"), None);
    }
}

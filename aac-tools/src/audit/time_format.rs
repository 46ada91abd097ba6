//! The one timestamp format of the audit trail: RFC 3339 in UTC with microseconds
//! (`2025-06-22T15:30:00.123456Z`), so that text order is time order.

/// Now, in the audit trail's format.
pub(crate) fn now_timestamp() -> String {
    format_timestamp(time::OffsetDateTime::now_utc())
}

/// `at` in the audit trail's format. Written digit by digit: this runs for every audit
/// record, and `time`'s general formatter costs several times more; it is used only for
/// years it cannot write in four digits.
pub(crate) fn format_timestamp(at: time::OffsetDateTime) -> String {
    const FORMAT: &[time::format_description::BorrowedFormatItem<'static>] = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z"
    );
    let at = at.to_offset(time::UtcOffset::UTC);
    let year = match u32::try_from(at.year()) {
        Ok(year) if year <= 9999 => year,
        _ => {
            return at
                .format(FORMAT)
                .unwrap_or_else(|_| "1970-01-01T00:00:00.000000Z".to_owned());
        }
    };
    let mut text = *b"0000-00-00T00:00:00.000000Z";
    let mut put = |start: usize, width: usize, mut value: u32| {
        for i in (start..start + width).rev() {
            text[i] = b'0' + (value % 10) as u8;
            value /= 10;
        }
    };
    put(0, 4, year);
    put(5, 2, u32::from(u8::from(at.month())));
    put(8, 2, u32::from(at.day()));
    put(11, 2, u32::from(at.hour()));
    put(14, 2, u32::from(at.minute()));
    put(17, 2, u32::from(at.second()));
    put(20, 6, at.microsecond());
    text.iter().map(|&b| char::from(b)).collect()
}

/// `text` as a canonical timestamp, if it is an RFC 3339 timestamp.
#[cfg(feature = "sqlite")]
pub(crate) fn canonical_timestamp(text: &str) -> Option<String> {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(format_timestamp)
}

#[cfg(test)]
mod tests {
    use super::format_timestamp;

    #[test]
    fn timestamps_are_rfc3339_with_microseconds() {
        use time::macros::datetime;
        assert_eq!(
            format_timestamp(datetime!(2025-06-22 15:30:00.123456 UTC)),
            "2025-06-22T15:30:00.123456Z"
        );
        assert_eq!(
            format_timestamp(datetime!(0987-01-02 03:04:05.000007 UTC)),
            "0987-01-02T03:04:05.000007Z"
        );
        assert_eq!(
            format_timestamp(datetime!(2025-12-31 23:59:59.999999 -01:00)),
            "2026-01-01T00:59:59.999999Z"
        );
    }
}

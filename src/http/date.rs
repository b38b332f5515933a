//! The `Date` header value (RFC 9110 §6.6.1), rendered at most once a second per thread.
//!
//! Each handler thread keeps its own `DateCache`: no lock, no shared atomic, and a check
//! per response that costs one coarse clock read (`clock_gettime` through the vDSO) and
//! one compare; the `httpdate` crate writes the value once a second.

use std::time::{SystemTime, UNIX_EPOCH};

/// Length of an IMF-fixdate, in bytes: `Sun, 06 Nov 1994 08:49:37 GMT`.
pub(crate) const IMF_FIXDATE_LEN_BYTES: usize = 29;

/// The current IMF-fixdate, re-rendered only when the second changes.
pub struct DateCache {
    /// The Unix second `text` was rendered for.
    second: u64,
    text: [u8; IMF_FIXDATE_LEN_BYTES],
}

impl DateCache {
    pub fn new() -> Self {
        let second = unix_now();
        let mut text = [0u8; IMF_FIXDATE_LEN_BYTES];
        render_imf_fixdate(second, &mut text);
        DateCache { second, text }
    }

    /// The IMF-fixdate for now (29 bytes).
    pub fn get(&mut self) -> &[u8] {
        let now = unix_now();
        if now != self.second {
            render_imf_fixdate(now, &mut self.text);
            self.second = now;
        }
        &self.text
    }
}

impl Default for DateCache {
    fn default() -> Self {
        Self::new()
    }
}

/// Seconds since the Unix epoch; a clock set before 1970 reads as the epoch.
///
/// From the coarse real-time clock: the vDSO returns the time of the last timer tick
/// (a few milliseconds old at most) without reading the hardware counter, which is all a
/// one-second field needs and about a third of a precise read's cost per response.
fn unix_now() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) } == 0 {
        return u64::try_from(ts.tv_sec).unwrap_or(0);
    }
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The last second an IMF-fixdate's four-digit year can hold (9999-12-31T23:59:59Z).
const LAST_SECOND: u64 = 253_402_300_799;

/// Renders `unix_seconds` as an RFC 9110 §5.6.7 IMF-fixdate:
/// `day-name "," SP date1 SP time-of-day SP GMT`, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
/// A time past year 9999 is written as its last second.
pub(crate) fn render_imf_fixdate(unix_seconds: u64, out: &mut [u8; IMF_FIXDATE_LEN_BYTES]) {
    use std::io::Write;
    let t = UNIX_EPOCH + std::time::Duration::from_secs(unix_seconds.min(LAST_SECOND));
    // Always 29 bytes from 1970 to 9999: the write fills `out` exactly.
    let _ = write!(&mut out[..], "{}", httpdate::HttpDate::from(t));
}

/// Reads an HTTP-date as Unix seconds: the IMF-fixdate, or either obsolete form a recipient
/// must also accept (RFC 9110 §5.6.7: RFC 850's `Sunday, 06-Nov-94 08:49:37 GMT` and
/// asctime's `Sun Nov  6 08:49:37 1994`); `None` for anything else (a conditional request
/// that uses one is answered as if it had none).
pub(crate) fn parse_http_date(s: &[u8]) -> Option<u64> {
    let t = httpdate::parse_http_date(std::str::from_utf8(s).ok()?).ok()?;
    t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_imf_fixdate_reads_back_as_the_second_it_was_rendered_for() {
        let mut out = [0u8; IMF_FIXDATE_LEN_BYTES];
        for t in [0, 784_111_777, 951_782_400, 1_700_000_000, 4_102_444_799] {
            render_imf_fixdate(t, &mut out);
            assert_eq!(
                parse_http_date(&out),
                Some(t),
                "{}",
                String::from_utf8_lossy(&out)
            );
        }
        // The obsolete forms a recipient must accept too (RFC 9110 §5.6.7).
        for old in [
            &b"Sunday, 06-Nov-94 08:49:37 GMT"[..],
            b"Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(parse_http_date(old), Some(784_111_777));
        }
        for bad in [
            &b"Sun, 06 Nov 1994 08:49:37 UTC"[..],
            b"Sun, 06 Nov 1994 08:49:37 GMT trailing",
            b"\xff\xfe",
            b"Sun, 06 Foo 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 25:49:37 GMT",
            b"",
        ] {
            assert_eq!(
                parse_http_date(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    fn render(t: u64) -> String {
        let mut out = [0u8; IMF_FIXDATE_LEN_BYTES];
        render_imf_fixdate(t, &mut out);
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn renders_known_timestamps() {
        // Reference values from Python's email.utils.formatdate(t, usegmt=True).
        let table = [
            (0, "Thu, 01 Jan 1970 00:00:00 GMT"),
            (784_111_777, "Sun, 06 Nov 1994 08:49:37 GMT"),
            (68_169_600, "Tue, 29 Feb 1972 00:00:00 GMT"),
            (951_782_400, "Tue, 29 Feb 2000 00:00:00 GMT"),
            (951_868_799, "Tue, 29 Feb 2000 23:59:59 GMT"),
            (1_234_567_890, "Fri, 13 Feb 2009 23:31:30 GMT"),
            (1_700_000_000, "Tue, 14 Nov 2023 22:13:20 GMT"),
            (2_147_483_647, "Tue, 19 Jan 2038 03:14:07 GMT"),
            (4_107_542_399, "Sun, 28 Feb 2100 23:59:59 GMT"),
            (4_107_542_400, "Mon, 01 Mar 2100 00:00:00 GMT"),
            (4_294_967_295, "Sun, 07 Feb 2106 06:28:15 GMT"),
            (253_402_300_799, "Fri, 31 Dec 9999 23:59:59 GMT"),
        ];
        for (t, want) in table {
            assert_eq!(render(t), want, "{t}");
        }
    }

    #[test]
    fn never_panics_at_the_extremes() {
        let s = render(u64::MAX);
        assert_eq!(s.len(), IMF_FIXDATE_LEN_BYTES);
        assert!(s.ends_with(" GMT"));
    }

    #[test]
    fn cache_gives_a_well_formed_current_date() {
        let mut cache = DateCache::new();
        let a = cache.get().to_vec();
        assert_eq!(a.len(), IMF_FIXDATE_LEN_BYTES);
        assert_eq!(&a[3..5], b", ");
        assert!(a.ends_with(b" GMT"));
        let year: u32 = std::str::from_utf8(&a[12..16]).unwrap().parse().unwrap();
        assert!(year >= 2024, "{}", String::from_utf8_lossy(&a));
        // Same second or the next one; either way the same shape.
        let b = cache.get().to_vec();
        assert_eq!(b.len(), IMF_FIXDATE_LEN_BYTES);
    }

    #[test]
    fn cache_rerenders_when_the_second_changes() {
        let mut cache = DateCache::new();
        // Pretend the cached text is from long ago: the next get must replace it.
        cache.second = 0;
        cache.text = *b"Thu, 01 Jan 1970 00:00:00 GMT";
        assert_ne!(cache.get(), b"Thu, 01 Jan 1970 00:00:00 GMT");
    }
}

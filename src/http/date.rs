//! The `Date` header value (RFC 9110 §6.6.1), rendered at most once a second per thread.
//!
//! Each handler thread keeps its own `DateCache`: no lock, no shared atomic, and a check
//! per response that costs one coarse clock read (`clock_gettime` through the vDSO) and
//! one compare. The calendar conversion is done by hand (Howard Hinnant's `civil_from_days`)
//! instead of pulling in a date crate for one format.

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

const SECONDS_PER_DAY: u64 = 86_400;
const WEEKDAYS: [&[u8; 3]; 7] = [b"Sun", b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat"];
const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// Renders `unix_seconds` as an RFC 9110 §5.6.7 IMF-fixdate:
/// `day-name "," SP date1 SP time-of-day SP GMT`, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
/// Years past 9999 do not fit the 4-digit field and are written modulo 10000.
pub(crate) fn render_imf_fixdate(unix_seconds: u64, out: &mut [u8; IMF_FIXDATE_LEN_BYTES]) {
    let days = unix_seconds / SECONDS_PER_DAY;
    let secs_of_day = unix_seconds % SECONDS_PER_DAY;
    let (year, month, day) = civil_from_days(days);
    // 1970-01-01 was a Thursday (index 4 from Sunday).
    let weekday = WEEKDAYS[((days + 4) % 7) as usize];
    let month = MONTHS[(month - 1) as usize % 12];
    let (hour, minute, second) = (secs_of_day / 3600, secs_of_day / 60 % 60, secs_of_day % 60);

    out[0..3].copy_from_slice(weekday);
    out[3..5].copy_from_slice(b", ");
    two_digits(&mut out[5..7], day);
    out[7] = b' ';
    out[8..11].copy_from_slice(month);
    out[11] = b' ';
    let year = year % 10_000;
    two_digits(&mut out[12..14], year / 100);
    two_digits(&mut out[14..16], year % 100);
    out[16] = b' ';
    two_digits(&mut out[17..19], hour);
    out[19] = b':';
    two_digits(&mut out[20..22], minute);
    out[22] = b':';
    two_digits(&mut out[23..25], second);
    out[25..29].copy_from_slice(b" GMT");
}

/// Reads an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`, RFC 9110 §5.6.7) as Unix
/// seconds; `None` for anything else (the obsolete forms included: a conditional request
/// that uses one is answered as if it had none).
pub(crate) fn parse_imf_fixdate(s: &[u8]) -> Option<u64> {
    if s.len() != IMF_FIXDATE_LEN_BYTES || &s[3..5] != b", " || &s[25..] != b" GMT" {
        return None;
    }
    let num = |b: &[u8]| -> Option<u64> {
        b.iter().try_fold(0u64, |n, &d| {
            d.is_ascii_digit().then(|| n * 10 + u64::from(d - b'0'))
        })
    };
    let day = num(&s[5..7])?;
    let month = MONTHS.iter().position(|m| &s[8..11] == *m)? as u64 + 1;
    let year = num(&s[12..16])?;
    let (h, m, sec) = (num(&s[17..19])?, num(&s[20..22])?, num(&s[23..25])?);
    if s[7] != b' ' || s[11] != b' ' || s[16] != b' ' || s[19] != b':' || s[22] != b':' {
        return None;
    }
    if year < 1970 || !(1..=31).contains(&day) || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's `days_from_civil`, years from 1970 on).
    let (y, mo) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * mo + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    Some(days * SECONDS_PER_DAY + h * 3600 + m * 60 + sec)
}

fn two_digits(out: &mut [u8], n: u64) {
    let n = n % 100;
    if let [tens, ones] = out {
        *tens = b'0' + (n / 10) as u8;
        *ones = b'0' + (n % 10) as u8;
    }
}

/// Days since 1970-01-01 -> (year, month 1..=12, day 1..=31) in the proleptic Gregorian
/// calendar (also used by the log's timestamps). Howard Hinnant, "chrono-Compatible Low-Level Date Algorithms", `civil_from_days`,
/// restricted to days >= 0 (so all arithmetic is unsigned): shift the epoch to 0000-03-01 so
/// that the leap day ends each 400-year era, then split into era, year of era, day of year.
pub(crate) fn civil_from_days(days: u64) -> (u64, u64, u64) {
    const DAYS_FROM_0000_03_01_TO_EPOCH: u64 = 719_468;
    const DAYS_PER_ERA: u64 = 146_097;
    let z = days + DAYS_FROM_0000_03_01_TO_EPOCH;
    let era = z / DAYS_PER_ERA;
    let doe = z - era * DAYS_PER_ERA; // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365], from March 1st
    let mp = (5 * doy + 2) / 153; // [0, 11], March = 0
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
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
                parse_imf_fixdate(&out),
                Some(t),
                "{}",
                String::from_utf8_lossy(&out)
            );
        }
        for bad in [
            &b"Sunday, 06-Nov-94 08:49:37 GMT"[..],
            b"Sun Nov  6 08:49:37 1994",
            b"Sun, 06 Nov 1994 08:49:37 UTC",
            b"Sun, 06 Foo 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 25:49:37 GMT",
            b"",
        ] {
            assert_eq!(
                parse_imf_fixdate(bad),
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
    fn civil_dates_round_trip_over_centuries() {
        // Walk day by day from 1970 to 2500 and check the calendar advances by exactly one
        // day each time (month lengths, leap years, century rules).
        let mut prev = civil_from_days(0);
        assert_eq!(prev, (1970, 1, 1));
        for days in 1..(530 * 366) {
            let (y, m, d) = civil_from_days(days);
            let (py, pm, pd) = prev;
            let leap = |y: u64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
            let len = match pm {
                2 if leap(py) => 29,
                2 => 28,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            let want = if pd < len {
                (py, pm, pd + 1)
            } else if pm < 12 {
                (py, pm + 1, 1)
            } else {
                (py + 1, 1, 1)
            };
            assert_eq!((y, m, d), want, "day {days}");
            prev = (y, m, d);
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

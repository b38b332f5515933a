//! Bytes, text, time, files.

use super::*;

/// A latin-1 string (every char <= U+00FF) back to its bytes.
pub fn latin1_bytes(s: &str) -> Vec<u8> {
    s.chars()
        .map(|c| {
            let u = c as u32;
            assert!(u <= 0xff, "char {c:?} (U+{u:04X}) is not latin-1: {s:?}");
            u as u8
        })
        .collect()
}

/// Bytes as a latin-1 string (what PEP 3333 calls a native string).
pub fn latin1_string(b: &[u8]) -> String {
    b.iter().map(|&c| c as char).collect()
}

/// RFC 3986 percent-decoding over bytes; malformed escapes stay as they are.
pub fn percent_decode(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' && i + 2 < s.len() {
            let h = (s[i + 1] as char).to_digit(16);
            let l = (s[i + 2] as char).to_digit(16);
            if let (Some(h), Some(l)) = (h, l) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

/// Parses an RFC 9110 IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") strictly,
/// including that the day name matches the date. Returns Unix seconds.
pub fn parse_imf_fixdate(s: &str) -> Option<i64> {
    const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let b = s.as_bytes();
    if b.len() != 29
        || &s[3..5] != ", "
        || b[7] != b' '
        || b[11] != b' '
        || b[16] != b' '
        || b[19] != b':'
        || b[22] != b':'
        || &s[25..] != " GMT"
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = &s[r];
        if t.bytes().all(|c| c.is_ascii_digit()) {
            t.parse().ok()
        } else {
            None
        }
    };
    let wday = DAYS.iter().position(|d| *d == &s[0..3])? as i64;
    let day = num(5..7)?;
    let month = MONTHS.iter().position(|m| *m == &s[8..11])? as i64 + 1;
    let year = num(12..16)?;
    let (hh, mm, ss) = (num(17..19)?, num(20..22)?, num(23..25)?);
    if !(1..=31).contains(&day) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    // 1970-01-01 was a Thursday (index 3 with Monday = 0).
    if (days + 3).rem_euclid(7) != wday {
        return None;
    }
    Some(days * 86400 + hh * 3600 + mm * 60 + ss)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A script that makes /root enterable by anyone in a fresh mount namespace (a
/// world-readable directory with the real /root's pyenv tree bound inside), then runs
/// its arguments.
pub fn open_root(tmp: &TempDir) -> String {
    use std::os::unix::fs::PermissionsExt;
    // The test's own files (a socket, a key) are for the user to reach too.
    std::fs::set_permissions(&tmp.path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let fake = tmp.path.join("fakeroot");
    std::fs::create_dir_all(fake.join(".pyenv")).unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = tmp.path.join("open-root.sh");
    std::fs::write(
        &script,
        format!(
            "set -e\nif [ -d /root/.pyenv ]; then mount --rbind /root/.pyenv {f}/.pyenv; fi\n\
             mount --rbind {f} /root\nexec \"$@\"\n",
            f = fake.display()
        ),
    )
    .unwrap();
    script.to_string_lossy().into_owned()
}

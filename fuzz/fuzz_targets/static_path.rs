//! `--static-map`'s path resolution and its header readers on arbitrary bytes: never a
//! panic; a resolved path is relative, has no empty, dot or dot-dot segment, no NUL and no
//! backslash, so it cannot name anything above the mount whatever the input spelled; a
//! range lies inside the file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use m0serve::internals::static_files::{self as sf, Range};

fuzz_target!(|data: &[u8]| {
    let mut out = Vec::new();
    if sf::file_path(data, &mut out).is_some() {
        assert!(!out.starts_with(b"/") && !out.contains(&0) && !out.contains(&b'\\'));
        for segment in out.split(|&b| b == b'/') {
            if out.is_empty() {
                break;
            }
            assert!(!segment.is_empty() && segment[0] != b'.', "{out:?} from {data:?}");
        }
    }
    for len in [0u64, 1, 100, u64::MAX] {
        match sf::range(data, len) {
            Range::Part { start, end } => assert!(start <= end && end < len),
            Range::Whole | Range::Unsatisfiable => {}
        }
    }
    let _ = sf::accepts(data, b"br");
    let _ = sf::none_match_hits(data, b"\"x\"");
    let _ = sf::if_range_holds(data, b"\"x\"", 0);
    let _ = sf::not_modified_since(data, 0);
    let _ = sf::is_hashed_name(data);
    let mut t = Vec::new();
    sf::content_type(data, &[], &mut t);
});

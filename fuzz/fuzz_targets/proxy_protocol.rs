//! The PROXY protocol header parser on arbitrary bytes: never a panic, a complete header
//! never claims more bytes than it was given, and the header alone parses to the same
//! result (the parse never looks past the header, so what follows cannot change it).
#![no_main]

use libfuzzer_sys::fuzz_target;
use m0serve::internals::proxy_protocol::{parse, Parsed};

fuzz_target!(|data: &[u8]| {
    let whole = parse(data);
    if let Ok(Parsed::Done { len, .. }) = whole {
        assert!(len <= data.len(), "len {len} of {}", data.len());
        assert_eq!(
            parse(&data[..len]),
            whole,
            "the header alone parses differently"
        );
        // One byte short of the header is never complete.
        if let Some(short) = len.checked_sub(1) {
            assert!(
                !matches!(parse(&data[..short]), Ok(Parsed::Done { .. })),
                "a prefix of the header parsed as complete"
            );
        }
    }
});

//! The request head parser on arbitrary bytes: never a panic, and every span of a parsed
//! head lies inside the head, under both the default limits and small ones.
#![no_main]

use libfuzzer_sys::fuzz_target;
use m0serve::internals::Limits;
use m0serve::internals::parse_head;

fuzz_target!(|data: &[u8]| {
    let small = Limits {
        max_request_line: 256,
        max_head: 1024,
        max_headers: 8,
    };
    for limits in [Limits::default(), small] {
        if let Ok(Some(head)) = parse_head(data, &limits) {
            assert!(head.head_len <= data.len());
            assert!(head.head_len <= limits.max_head);
            let within = &data[..head.head_len];
            let _ = head.method.get(within);
            let _ = head.target.get(within);
            assert!(head.headers.len() <= limits.max_headers);
            for h in &head.headers {
                let _ = h.name.get(within);
                let _ = h.value.get(within);
            }
        }
    }
});

//! The chunked decoder on arbitrary bytes, fed whole and in pieces of every size the first
//! byte picks: never a panic, never a claim to have used more than it was given, and the
//! same verdict and the same decoded bytes however the input is split.
#![no_main]

use libfuzzer_sys::fuzz_target;
use m0serve::internals::ChunkedDecoder;

/// (decoded bytes, finished, failed, bytes used)
fn run(input: &[u8], step: usize) -> (Vec<u8>, bool, bool, usize) {
    let mut dec = ChunkedDecoder::new(4096);
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < input.len() {
        let mut end = (pos + step).min(input.len());
        loop {
            match dec.decode(&input[pos..end], &mut out) {
                Ok((used, done)) => {
                    assert!(used <= end - pos, "used {used} of {}", end - pos);
                    pos += used;
                    if done {
                        return (out, true, false, pos);
                    }
                    if used == 0 {
                        if end == input.len() {
                            return (out, false, false, pos);
                        }
                        end = input.len();
                        continue;
                    }
                    break;
                }
                Err(_) => return (out, false, true, pos),
            }
        }
    }
    (out, false, false, pos)
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, input)) = data.split_first() else {
        return;
    };
    let whole = run(input, input.len().max(1));
    let pieces = run(input, usize::from(first % 17) + 1);
    assert_eq!(whole.1, pieces.1, "finished differs by split");
    assert_eq!(whole.2, pieces.2, "failure differs by split");
    if whole.1 {
        assert_eq!(whole.0, pieces.0, "decoded bytes differ by split");
        assert_eq!(whole.3, pieces.3, "end of body differs by split");
    }
    assert!(whole.0.len() <= 4096 || whole.2, "past the body limit without failing");
});

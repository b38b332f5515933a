// TEMP STUB
pub fn percent_decode_into(input: &[u8], out: &mut Vec<u8>) { out.extend_from_slice(input) }
pub fn split_target(t: &[u8]) -> (&[u8], &[u8]) { match t.iter().position(|&b| b == b'?') { Some(i) => (&t[..i], &t[i+1..]), None => (t, &[]) } }

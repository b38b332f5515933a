// TEMP STUB (replaced by the http helper's file)
pub struct DateCache { buf: [u8; 29] }
impl DateCache { pub fn new() -> Self { DateCache { buf: *b"Sun, 06 Nov 1994 08:49:37 GMT" } } pub fn get(&mut self) -> &[u8] { &self.buf } }
impl Default for DateCache { fn default() -> Self { Self::new() } }
pub fn civil_from_days(z: i64) -> (i64, u32, u32) { let _ = z; (1970, 1, 1) }

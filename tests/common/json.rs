//! JSON in the tests: serde_json's `Value` (members in document order), read with
//! `Json::parse` as the tests call it.

pub use serde_json::Value as Json;

/// `Json::parse(text)`: the value, or serde_json's message.
pub trait ParseJson: Sized {
    fn parse(text: &str) -> Result<Self, String>;
}

impl ParseJson for Json {
    fn parse(text: &str) -> Result<Json, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }
}

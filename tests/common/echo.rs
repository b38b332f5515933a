//! The echo app's answer.

use super::*;

/// What tests/apps/echo.py saw.
#[derive(Debug)]
pub struct Echo {
    pub json: Json,
    /// Every environ key without a dot (CGI variables), value as echoed.
    pub cgi: BTreeMap<String, String>,
    /// Python type name of every environ value.
    pub types: BTreeMap<String, String>,
    pub body: Vec<u8>,
    pub pieces: Vec<Vec<u8>>,
}

impl Echo {
    pub fn parse(r: &Response) -> Echo {
        assert_eq!(
            r.status,
            200,
            "echo app did not answer 200: {} {:?}",
            r.status_line(),
            show(&r.body)
        );
        let text = std::str::from_utf8(&r.body)
            .unwrap_or_else(|_| panic!("echo body is not UTF-8: {:?}", show(&r.body)));
        let json = Json::parse(text)
            .unwrap_or_else(|e| panic!("echo body is not JSON ({e}): {}", show(&r.body)));
        let obj_map = |key: &str| -> BTreeMap<String, String> {
            json[key]
                .as_object()
                .unwrap_or_else(|| panic!("echo JSON has no object {key:?}"))
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("<non-string>").to_string()))
                .collect()
        };
        let cgi = obj_map("cgi");
        let types = obj_map("types");
        let body = latin1_bytes(json["body"].as_str().expect("echo body"));
        let pieces = json["pieces"]
            .as_array()
            .expect("echo pieces")
            .iter()
            .map(|p| latin1_bytes(p.as_str().unwrap()))
            .collect();
        Echo {
            json,
            cgi,
            types,
            body,
            pieces,
        }
    }

    pub fn var(&self, key: &str) -> Option<&str> {
        self.cgi.get(key).map(|s| s.as_str())
    }

    /// The value of a CGI variable that must be present.
    pub fn must(&self, key: &str) -> &str {
        self.var(key).unwrap_or_else(|| {
            panic!(
                "environ has no {key}; CGI keys: {:?}",
                self.cgi.keys().collect::<Vec<_>>()
            )
        })
    }

    /// The request's headers as the app saw them: HTTP_* plus CONTENT_TYPE
    /// and CONTENT_LENGTH.
    pub fn header_vars(&self) -> BTreeMap<String, String> {
        self.cgi
            .iter()
            .filter(|(k, _)| {
                k.starts_with("HTTP_") || *k == "CONTENT_TYPE" || *k == "CONTENT_LENGTH"
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    pub fn wsgi(&self, key: &str) -> &Json {
        &self.json["wsgi"][key]
    }
}

/// The WSGI environ key a request header maps to (PEP 3333 / CGI 1.1).
pub fn environ_key(header_name: &str) -> String {
    let up = header_name.to_ascii_uppercase().replace('-', "_");
    match up.as_str() {
        "CONTENT_TYPE" | "CONTENT_LENGTH" => up,
        _ => format!("HTTP_{up}"),
    }
}

/// The environ entries a list of request headers must produce: repeated
/// headers joined with "," (Cookie with "; "), as the issue specifies.
pub fn expected_header_vars(headers: &[(String, String)]) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in headers {
        let key = environ_key(k);
        let sep = if key == "HTTP_COOKIE" { "; " } else { "," };
        out.entry(key)
            .and_modify(|e| {
                e.push_str(sep);
                e.push_str(v);
            })
            .or_insert_with(|| v.clone());
    }
    out
}

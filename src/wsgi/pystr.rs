//! PEP 3333's "native strings" and bytestrings at the boundary: latin-1 `str` to bytes and
//! back without a codec lookup, and the one check a body item gets.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

/// A latin-1 native string from bytes (PEP 3333: "native strings" decoded as ISO-8859-1).
pub(crate) fn latin1_str<'py>(py: Python<'py>, bytes: &[u8]) -> PyResult<Bound<'py, PyString>> {
    // SAFETY: the pointer and length describe `bytes`, which outlives the call; latin-1
    // decoding cannot fail on any byte, and a NULL result (memory) becomes the pending
    // Python error.
    unsafe {
        let p = ffi::PyUnicode_DecodeLatin1(
            bytes.as_ptr().cast(),
            bytes.len() as ffi::Py_ssize_t,
            std::ptr::null(),
        );
        Bound::from_owned_ptr_or_err(py, p).map(|b| b.cast_into_unchecked())
    }
}

/// The latin-1 bytes of a native string (PEP 3333: status and header names and values are
/// `str` holding only code points below 256).
pub(crate) fn latin1<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<&'a [u8]> {
    let s = obj.cast::<PyString>().map_err(|_| {
        let ty = obj
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        PyTypeError::new_err(format!("{what} must be str, not {ty}"))
    })?;
    let p = s.as_ptr();
    // SAFETY: `p` is a live str object (borrowed by `s` for 'a). A str created by Python
    // code is always "ready" (PEP 393), so KIND/DATA/GET_LENGTH are valid; a 1-byte kind
    // stores exactly its latin-1 code points, GET_LENGTH of them, for as long as the object
    // lives, which `'a` covers.
    unsafe {
        if ffi::PyUnicode_READY(p) != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        if ffi::PyUnicode_KIND(p) != ffi::PyUnicode_1BYTE_KIND {
            return Err(PyValueError::new_err(format!(
                "{what} must contain only latin-1 characters"
            )));
        }
        let data = ffi::PyUnicode_DATA(p) as *const u8;
        let len = ffi::PyUnicode_GET_LENGTH(p) as usize;
        Ok(std::slice::from_raw_parts(data, len))
    }
}

/// A body item (PEP 3333: bytestrings only).
pub(crate) fn bytes_of<'a, 'py>(item: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, PyBytes>> {
    match item.cast::<PyBytes>() {
        Ok(b) => Ok(b),
        Err(_) => {
            let ty = item
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default();
            Err(PyTypeError::new_err(format!(
                "response body items must be bytes, not {ty}"
            )))
        }
    }
}

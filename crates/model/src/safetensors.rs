//! Safetensors headers, read without the tensor data.
//!
//! A safetensors file is an 8-byte little-endian header length N, N bytes of JSON describing each
//! tensor (`dtype`, `shape`, `data_offsets` into the data that follows), then the data. Only the
//! first 8 + N bytes are ever read here, so a 140 GB checkpoint costs a few kilobytes of I/O. The
//! header is hostile input: a length over [`MAX_HEADER_BYTES`] or past the end of the file, JSON
//! that is not an object of tensor entries, an unknown dtype, a shape whose bytes differ from its
//! offsets, offsets outside the file's data or overlapping another tensor are all refused with the
//! file and the tensor named. (The `safetensors` crate validates the same way but wants the whole
//! file in memory or mapped; this reader needs only the header.)

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use serde_json::Value;

use crate::error::ModelError;

/// The largest header accepted, as the `safetensors` format itself bounds it (100 MB).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// The dtypes of the safetensors format with a whole number of bytes per element, and that size.
pub const DTYPES: [(&str, u64); 17] = [
    ("BOOL", 1),
    ("U8", 1),
    ("I8", 1),
    ("F8_E5M2", 1),
    ("F8_E4M3", 1),
    ("F8_E8M0", 1),
    ("I16", 2),
    ("U16", 2),
    ("F16", 2),
    ("BF16", 2),
    ("I32", 4),
    ("U32", 4),
    ("F32", 4),
    ("C64", 8),
    ("I64", 8),
    ("U64", 8),
    ("F64", 8),
];

/// Bytes per element of a dtype named as safetensors names it.
pub fn dtype_bytes(dtype: &str) -> Option<u64> {
    DTYPES.iter().find(|(d, _)| *d == dtype).map(|(_, b)| *b)
}

/// One tensor of a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Its name (`model.layers.0.self_attn.q_proj.weight`).
    pub name: String,
    /// Its dtype (`BF16`).
    pub dtype: String,
    /// Elements: the product of its shape.
    pub elements: u64,
    /// Bytes of data: `data_offsets[1] - data_offsets[0]`.
    pub bytes: u64,
}

/// What one file's header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Every tensor, in the header's order.
    pub tensors: Vec<TensorInfo>,
    /// Bytes read from the file (8 + the header length): the data is never read.
    pub bytes_read: u64,
}

impl Header {
    /// Elements per dtype.
    pub fn elements_by_dtype(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for t in &self.tensors {
            *out.entry(t.dtype.clone()).or_insert(0) += t.elements;
        }
        out
    }
}

/// Reads and checks the header of the safetensors file at `path`; `name` names it in messages.
pub fn read_header(path: &Path, name: &str) -> Result<Header, ModelError> {
    let io = |source| ModelError::Read {
        file: name.to_string(),
        source,
    };
    let mut file = File::open(path).map_err(io)?;
    let file_len = file.metadata().map_err(io)?.len();
    let mut length = [0u8; 8];
    file.read_exact(&mut length).map_err(|source| {
        if source.kind() == std::io::ErrorKind::UnexpectedEof {
            ModelError::HeaderBeyondFile {
                file: name.to_string(),
                length: 8,
                available: file_len,
            }
        } else {
            io(source)
        }
    })?;
    let length = u64::from_le_bytes(length);
    if length > MAX_HEADER_BYTES {
        return Err(ModelError::HeaderTooLarge {
            file: name.to_string(),
            length,
        });
    }
    let available = file_len.saturating_sub(8);
    if length > available {
        return Err(ModelError::HeaderBeyondFile {
            file: name.to_string(),
            length,
            available,
        });
    }
    let mut json = Vec::with_capacity(length as usize);
    file.by_ref()
        .take(length)
        .read_to_end(&mut json)
        .map_err(io)?;
    if json.len() as u64 != length {
        return Err(ModelError::HeaderBeyondFile {
            file: name.to_string(),
            length,
            available: json.len() as u64,
        });
    }
    let mut header = parse_header(&json, available - length, name)?;
    header.bytes_read = 8 + length;
    Ok(header)
}

/// Checks a header's JSON against the size of the data that follows it (`data_len` bytes).
pub fn parse_header(json: &[u8], data_len: u64, name: &str) -> Result<Header, ModelError> {
    let value: Value = serde_json::from_slice(json).map_err(|err| ModelError::Json {
        file: name.to_string(),
        message: format!("safetensors header: {err}"),
        expected: "a JSON object with one entry per tensor",
    })?;
    let Value::Object(map) = value else {
        return Err(ModelError::Json {
            file: name.to_string(),
            message: "the safetensors header is not an object".to_string(),
            expected: "a JSON object with one entry per tensor",
        });
    };
    let mut tensors = Vec::with_capacity(map.len());
    let mut spans: Vec<(u64, u64, usize)> = Vec::with_capacity(map.len());
    for (tensor, entry) in &map {
        if tensor == "__metadata__" {
            continue;
        }
        let fault = |problem: String| ModelError::Tensor {
            file: name.to_string(),
            tensor: tensor.clone(),
            problem,
        };
        let dtype = entry
            .get("dtype")
            .and_then(Value::as_str)
            .ok_or_else(|| fault("has no `dtype` string; expected e.g. \"BF16\"".to_string()))?;
        let size = dtype_bytes(dtype).ok_or_else(|| {
            fault(format!(
                "has dtype `{dtype}`, which is not known; expected one of {}",
                DTYPES.map(|(d, _)| d).join(", ")
            ))
        })?;
        let shape = entry
            .get("shape")
            .and_then(Value::as_array)
            .ok_or_else(|| fault("has no `shape` array; expected e.g. [4096, 4096]".to_string()))?;
        let mut elements: u64 = 1;
        for dim in shape {
            let dim = dim.as_u64().ok_or_else(|| {
                fault(format!(
                    "has a shape entry `{dim}`; expected whole numbers of 0 or more"
                ))
            })?;
            elements = elements
                .checked_mul(dim)
                .ok_or_else(|| fault("has a shape whose element count exceeds 2^64".to_string()))?;
        }
        let offsets = entry
            .get("data_offsets")
            .and_then(Value::as_array)
            .filter(|o| o.len() == 2)
            .and_then(|o| Some((o[0].as_u64()?, o[1].as_u64()?)))
            .ok_or_else(|| {
                fault("has no `data_offsets` pair of whole numbers; expected [begin, end]".into())
            })?;
        let (begin, end) = offsets;
        if begin > end {
            return Err(fault(format!(
                "has data_offsets [{begin}, {end}] that end before they begin"
            )));
        }
        if end > data_len {
            return Err(fault(format!(
                "claims bytes {begin} to {end} but the file holds {data_len} bytes of tensor data; \
                 the offsets are outside the file"
            )));
        }
        let want = elements
            .checked_mul(size)
            .ok_or_else(|| fault("has a shape whose byte count exceeds 2^64".to_string()))?;
        if want != end - begin {
            return Err(fault(format!(
                "has shape {} of {dtype} ({want} bytes) but data_offsets [{begin}, {end}] span {} \
                 bytes; expected them to agree",
                Value::Array(shape.clone()),
                end - begin
            )));
        }
        spans.push((begin, end, tensors.len()));
        tensors.push(TensorInfo {
            name: tensor.clone(),
            dtype: dtype.to_string(),
            elements,
            bytes: end - begin,
        });
    }
    // No two tensors may share bytes: sort by start, each must start at or after the previous end.
    spans.sort_unstable();
    for pair in spans.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if b.0 < a.1 && b.0 != b.1 && a.0 != a.1 {
            return Err(ModelError::Tensor {
                file: name.to_string(),
                tensor: tensors[b.2].name.clone(),
                problem: format!(
                    "has data_offsets [{}, {}] overlapping tensor `{}` at [{}, {}]; expected each \
                     tensor's bytes to be its own",
                    b.0, b.1, tensors[a.2].name, a.0, a.1
                ),
            });
        }
    }
    Ok(Header {
        tensors,
        bytes_read: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(json: &str, data_len: u64) -> Result<Header, ModelError> {
        parse_header(json.as_bytes(), data_len, "m.safetensors")
    }

    #[test]
    fn a_valid_header_counts_elements_and_bytes() {
        let h = header(
            r#"{"__metadata__":{"format":"pt"},
                "a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},
                "b":{"dtype":"F32","shape":[4],"data_offsets":[12,28]},
                "c":{"dtype":"F8_E4M3","shape":[0],"data_offsets":[28,28]}}"#,
            28,
        )
        .unwrap();
        assert_eq!(h.tensors.len(), 3);
        let by = h.elements_by_dtype();
        assert_eq!(by["BF16"], 6);
        assert_eq!(by["F32"], 4);
        assert_eq!(by["F8_E4M3"], 0);
    }

    #[test]
    fn hostile_entries_are_refused_naming_the_tensor() {
        for (json, says) in [
            (
                r#"{"x":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}}"#,
                "tensor `x` has dtype `Q4`, which is not known",
            ),
            (
                r#"{"x":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"y":{"dtype":"F16","shape":[2],"data_offsets":[2,6]}}"#,
                "tensor `y` has data_offsets [2, 6] overlapping tensor `x`",
            ),
            (
                r#"{"x":{"dtype":"F16","shape":[8],"data_offsets":[0,16]}}"#,
                "claims bytes 0 to 16 but the file holds 10 bytes",
            ),
            (
                r#"{"x":{"dtype":"F16","shape":[3],"data_offsets":[0,4]}}"#,
                "(6 bytes) but data_offsets [0, 4] span 4 bytes",
            ),
            (
                r#"{"x":{"dtype":"F16","shape":[2],"data_offsets":[4,0]}}"#,
                "end before they begin",
            ),
            (
                r#"{"x":{"dtype":"F16","shape":[-2],"data_offsets":[0,4]}}"#,
                "has a shape entry `-2`",
            ),
            (
                r#"{"x":{"dtype":"F16","shape":[4294967296,4294967296,4],"data_offsets":[0,4]}}"#,
                "exceeds 2^64",
            ),
            (
                r#"{"x":{"shape":[2],"data_offsets":[0,4]}}"#,
                "has no `dtype`",
            ),
            (
                r#"{"x":{"dtype":"F16","data_offsets":[0,4]}}"#,
                "has no `shape`",
            ),
            (
                r#"{"x":{"dtype":"F16","shape":[2],"data_offsets":[0]}}"#,
                "has no `data_offsets`",
            ),
        ] {
            let err = header(json, 10).unwrap_err().to_string();
            assert!(err.starts_with("m.safetensors: tensor `"), "{err}");
            assert!(err.contains(says), "wanted {says:?} in {err}");
        }
        for (json, says) in [("{", "is not valid JSON"), ("[1,2]", "is not an object")] {
            let err = header(json, 0).unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
        }
    }
}

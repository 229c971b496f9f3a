//! Safetensors headers, read without the tensor data.
//!
//! A safetensors file is an 8-byte little-endian header length N, N bytes of JSON describing each
//! tensor (`dtype`, `shape`, `data_offsets` into the data that follows), then the data. Only the
//! first 8 + N bytes are ever read here, so a 140 GB checkpoint costs a few kilobytes of I/O. The
//! header is hostile input: a length over [`MAX_HEADER_BYTES`] or past the end of the file, JSON
//! that is not an object of tensor entries, a tensor named twice, an unknown dtype, a shape whose
//! bytes differ from its offsets, offsets outside the file's data or overlapping another tensor,
//! and data that no tensor claims (a gap between two tensors, before the first or after the
//! last) are all refused with the file and the tensors named. The spans follow the format's own
//! rule (the `safetensors` crate's `validate`): sorted by offsets, they cover the data exactly,
//! from 0 to its end, each starting where the one before it ends (see `layout`). (The
//! `safetensors` crate validates the same way but wants the whole file in memory or mapped; this
//! reader needs only the header.)
//!
//! The JSON is read from the file as a stream, entry by entry, into compact [`TensorInfo`]s: no
//! JSON tree is built and the text is never held whole, so time stays linear in the header and
//! memory under 200 bytes per tensor (a tree of a 99 MB header of 1.5 million tensors took 2 GB).

use std::collections::BTreeMap;
use std::collections::hash_map::{Entry, HashMap};
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::io::{BufReader, Read};
use std::path::Path;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

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
    known_dtype(dtype).map(|(_, b)| b)
}

/// The dtype as [`DTYPES`] spells it, and its bytes per element.
fn known_dtype(dtype: &str) -> Option<(&'static str, u64)> {
    DTYPES.iter().find(|(d, _)| *d == dtype).copied()
}

/// One tensor of a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Its name (`model.layers.0.self_attn.q_proj.weight`).
    pub name: String,
    /// Its dtype (`BF16`), one of [`DTYPES`].
    pub dtype: &'static str,
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
            *out.entry(t.dtype.to_string()).or_insert(0) += t.elements;
        }
        out
    }
}

/// Reads and checks the header of the safetensors file at `path`; `name` names it in messages.
pub fn read_header(path: &Path, name: &str) -> Result<Header, ModelError> {
    let io = |reason| ModelError::Read {
        file: name.to_string(),
        reason,
    };
    let mut file = lab_io::files::open_input(path).map_err(io)?;
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
    // Streamed from the file: the header's text is never held whole.
    let mut json = file.take(length);
    let parsed = parse(
        &mut serde_json::Deserializer::from_reader(BufReader::with_capacity(1 << 16, &mut json)),
        available - length,
        name,
    );
    // The file ended before the length it gave (it shrank since its size was read).
    let ended_early = json.limit() > 0
        && match &parsed {
            Ok(_) => true,
            Err(Parsed::Json(err, _)) => err.is_eof(),
            Err(Parsed::Refused(_)) => false,
        };
    if ended_early {
        return Err(ModelError::HeaderBeyondFile {
            file: name.to_string(),
            length,
            available: length - json.limit(),
        });
    }
    let mut header = parsed.map_err(Parsed::into_error)?;
    header.bytes_read = 8 + length;
    Ok(header)
}

/// Checks a header's JSON against the size of the data that follows it (`data_len` bytes).
pub fn parse_header(json: &[u8], data_len: u64, name: &str) -> Result<Header, ModelError> {
    parse(
        &mut serde_json::Deserializer::from_slice(json),
        data_len,
        name,
    )
    .map_err(Parsed::into_error)
}

/// Why [`parse`] stopped: the header's own fault, or the JSON reader's error.
enum Parsed {
    Refused(ModelError),
    Json(serde_json::Error, String),
}

impl Parsed {
    fn into_error(self) -> ModelError {
        match self {
            Parsed::Refused(e) => e,
            Parsed::Json(err, file) => ModelError::Json {
                file,
                message: format!("safetensors header: {err}"),
                expected: EXPECTED,
            },
        }
    }
}

/// What a header should be, as messages say.
const EXPECTED: &str = "a JSON object with one entry per tensor";

/// Reads the header from `de` to its end, entry by entry.
fn parse<'de, R: serde_json::de::Read<'de>>(
    de: &mut serde_json::Deserializer<R>,
    data_len: u64,
    file: &str,
) -> Result<Header, Parsed> {
    let mut refused = None;
    let read = HeaderSeed {
        file,
        data_len,
        refused: &mut refused,
    }
    .deserialize(&mut *de)
    .and_then(|tensors| de.end().map(|()| tensors));
    match (read, refused) {
        (_, Some(fault)) => Err(Parsed::Refused(fault)),
        (Ok(Some(tensors)), None) => Ok(Header {
            tensors,
            bytes_read: 0,
        }),
        (Ok(None), None) => Err(Parsed::Refused(ModelError::Json {
            file: file.to_string(),
            message: "the safetensors header is not an object".to_string(),
            expected: EXPECTED,
        })),
        (Err(err), None) => Err(Parsed::Json(err, file.to_string())),
    }
}

/// Visitor methods for the JSON values a visitor does not want: each gives `$value`, arrays and
/// objects read through element by element (never held).
macro_rules! otherwise {
    ($value:expr => $($kind:ident)+) => { $( otherwise!(@$kind $value); )+ };
    (@bool $v:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> { Ok($v) }
    };
    (@i64 $v:expr) => {
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> { Ok($v) }
    };
    (@u64 $v:expr) => {
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> { Ok($v) }
    };
    (@f64 $v:expr) => {
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> { Ok($v) }
    };
    (@str $v:expr) => {
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> { Ok($v) }
    };
    (@unit $v:expr) => {
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> { Ok($v) }
    };
    (@seq $v:expr) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok($v)
        }
    };
    (@map $v:expr) => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok($v)
        }
    };
}

/// The whole header: `None` when it is not an object; a fault goes to `refused`.
struct HeaderSeed<'a> {
    file: &'a str,
    data_len: u64,
    refused: &'a mut Option<ModelError>,
}

impl<'de> DeserializeSeed<'de> for HeaderSeed<'_> {
    type Value = Option<Vec<TensorInfo>>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for HeaderSeed<'_> {
    type Value = Option<Vec<TensorInfo>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(EXPECTED)
    }

    otherwise!(None => bool i64 u64 f64 str unit seq);

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let file = self.file;
        let mut refuse = |fault: ModelError| {
            *self.refused = Some(fault);
            de::Error::custom("refused")
        };
        let mut tensors: Vec<TensorInfo> = Vec::new();
        let mut spans: Vec<(u64, u64, usize)> = Vec::new();
        let mut names = Names::default();
        let mut metadata = false;
        while let Some(tensor) = map.next_key::<String>()? {
            if tensor == "__metadata__" {
                if metadata {
                    return Err(refuse(ModelError::Json {
                        file: file.to_string(),
                        message: "the safetensors header holds `__metadata__` twice".to_string(),
                        expected: EXPECTED,
                    }));
                }
                metadata = true;
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            if !names.is_new(&tensor, &tensors) {
                return Err(refuse(ModelError::Tensor {
                    file: file.to_string(),
                    tensor,
                    problem: "is named twice in the header; expected each tensor once (a JSON \
                              reader would keep only one of the two)"
                        .to_string(),
                }));
            }
            let raw = map.next_value::<RawEntry>()?;
            let (info, begin, end) =
                check(file, tensor, raw, self.data_len).map_err(&mut refuse)?;
            spans.push((begin, end, tensors.len()));
            tensors.push(info);
        }
        if let Some(fault) = layout(file, &tensors, spans, self.data_len) {
            return Err(refuse(fault));
        }
        Ok(Some(tensors))
    }
}

/// The tensor names read so far, kept as their hashes pointing into the tensors read: no name
/// is held twice. Two different names with one 64-bit hash (with a random key: in practice
/// never) are told apart by comparing each such name.
#[derive(Default)]
struct Names {
    state: RandomState,
    first: HashMap<u64, usize>,
    collided: Vec<usize>,
}

impl Names {
    /// True when `name` is not among `tensors`; it is then recorded as the next of them.
    fn is_new(&mut self, name: &str, tensors: &[TensorInfo]) -> bool {
        match self.first.entry(self.state.hash_one(name)) {
            Entry::Vacant(slot) => {
                slot.insert(tensors.len());
                true
            }
            Entry::Occupied(slot) => {
                let same = |i: &usize| tensors[*i].name == name;
                if same(slot.get()) || self.collided.iter().any(same) {
                    false
                } else {
                    self.collided.push(tensors.len());
                    true
                }
            }
        }
    }
}

/// One tensor's entry as read, before it is checked: each field as far as it is usable.
#[derive(Default)]
struct RawEntry {
    /// The `dtype`, when it is a string.
    dtype: Option<String>,
    /// The `shape`, when it is an array.
    shape: Option<Shape>,
    /// The `data_offsets`, when they are an array of two whole numbers.
    offsets: Option<(u64, u64)>,
    /// A field given more than once.
    twice: Option<&'static str>,
}

/// A `shape` array, folded as it is read.
struct Shape {
    /// The product of the dimensions, or the first fault met.
    elements: Result<u64, ShapeFault>,
    /// The first [`SHOWN_DIMS`] dimensions, to show the shape in a message.
    dims: Vec<u64>,
    /// How many dimensions there are.
    count: usize,
}

/// The most dimensions a message shows (a real tensor has a few).
const SHOWN_DIMS: usize = 64;

enum ShapeFault {
    /// An entry that is not a whole number, as JSON writes it.
    Entry(String),
    /// The product exceeds 2^64.
    Overflow,
}

impl fmt::Display for Shape {
    /// As JSON writes it (`[2,3]`), up to [`SHOWN_DIMS`] dimensions.
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.dims.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        if self.count > self.dims.len() {
            write!(f, ",… ({} dimensions)", self.count)?;
        }
        f.write_str("]")
    }
}

impl<'de> de::Deserialize<'de> for RawEntry {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(EntryVisitor)
    }
}

struct EntryVisitor;

impl<'de> Visitor<'de> for EntryVisitor {
    type Value = RawEntry;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a tensor entry")
    }

    // Not an object: every field is absent, as the checks then say.
    otherwise!(RawEntry::default() => bool i64 u64 f64 str unit seq);

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawEntry, A::Error> {
        let mut raw = RawEntry::default();
        let mut seen = [false; 3];
        while let Some(field) = map.next_key::<Field>()? {
            let (index, name) = match field {
                Field::Dtype => (0, "dtype"),
                Field::Shape => (1, "shape"),
                Field::Offsets => (2, "data_offsets"),
                Field::Other => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            if std::mem::replace(&mut seen[index], true) {
                raw.twice.get_or_insert(name);
            }
            match field {
                Field::Dtype => raw.dtype = map.next_value_seed(DtypeSeed)?,
                Field::Shape => raw.shape = map.next_value_seed(ShapeSeed)?,
                _ => raw.offsets = map.next_value_seed(OffsetsSeed)?,
            }
        }
        Ok(raw)
    }
}

/// A key of a tensor entry.
enum Field {
    Dtype,
    Shape,
    Offsets,
    Other,
}

impl<'de> de::Deserialize<'de> for Field {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct FieldVisitor;
        impl Visitor<'_> for FieldVisitor {
            type Value = Field;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<Field, E> {
                Ok(match key {
                    "dtype" => Field::Dtype,
                    "shape" => Field::Shape,
                    "data_offsets" => Field::Offsets,
                    _ => Field::Other,
                })
            }
        }
        d.deserialize_str(FieldVisitor)
    }
}

/// A `dtype`: `Some` when it is a string.
struct DtypeSeed;

impl<'de> DeserializeSeed<'de> for DtypeSeed {
    type Value = Option<String>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DtypeSeed {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a dtype")
    }

    otherwise!(None => bool i64 u64 f64 unit seq map);

    fn visit_str<E: de::Error>(self, dtype: &str) -> Result<Self::Value, E> {
        Ok(Some(dtype.to_string()))
    }
}

/// A `shape`: `Some` when it is an array, folded into its product as it is read.
struct ShapeSeed;

impl<'de> DeserializeSeed<'de> for ShapeSeed {
    type Value = Option<Shape>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ShapeSeed {
    type Value = Option<Shape>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a shape")
    }

    otherwise!(None => bool i64 u64 f64 str unit map);

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut shape = Shape {
            elements: Ok(1),
            dims: Vec::new(),
            count: 0,
        };
        loop {
            let Ok(elements) = shape.elements else {
                // The fault is found: the rest is read through.
                if seq.next_element::<IgnoredAny>()?.is_none() {
                    break;
                }
                continue;
            };
            let Some(dim) = seq.next_element_seed(WholeSeed)? else {
                break;
            };
            shape.count += 1;
            shape.elements = match dim {
                Ok(dim) => {
                    if shape.dims.len() < SHOWN_DIMS {
                        shape.dims.push(dim);
                    }
                    elements.checked_mul(dim).ok_or(ShapeFault::Overflow)
                }
                Err(shown) => Err(ShapeFault::Entry(shown)),
            };
        }
        Ok(Some(shape))
    }
}

/// `data_offsets`: `Some` when they are an array of exactly two whole numbers.
struct OffsetsSeed;

impl<'de> DeserializeSeed<'de> for OffsetsSeed {
    type Value = Option<(u64, u64)>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for OffsetsSeed {
    type Value = Option<(u64, u64)>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("data offsets")
    }

    otherwise!(None => bool i64 u64 f64 str unit map);

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut pair = [None, None];
        let mut count = 0usize;
        while count < 2 {
            match seq.next_element_seed(WholeSeed)? {
                Some(n) => pair[count] = n.ok(),
                None => break,
            }
            count += 1;
        }
        while seq.next_element::<IgnoredAny>()?.is_some() {
            count += 1;
        }
        Ok(match (count, pair) {
            (2, [Some(begin), Some(end)]) => Some((begin, end)),
            _ => None,
        })
    }
}

/// A whole number, or how JSON writes the value that is not one.
struct WholeSeed;

impl<'de> DeserializeSeed<'de> for WholeSeed {
    type Value = Result<u64, String>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for WholeSeed {
    type Value = Result<u64, String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a whole number")
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
        Ok(Ok(n))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
        Ok(Err(n.to_string()))
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Self::Value, E> {
        Ok(Err(serde_json::Value::from(n).to_string()))
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Self::Value, E> {
        Ok(Err(b.to_string()))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Err(serde_json::Value::from(s).to_string()))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Err("null".to_string()))
    }

    // An array or an object is read through, not held: a message shows it as `[…]` or `{…}`.
    otherwise!(Err("[…]".to_string()) => seq);
    otherwise!(Err("{…}".to_string()) => map);
}

/// Checks one entry against the file's `data_len` bytes of data: the tensor, and its span.
fn check(
    file: &str,
    tensor: String,
    raw: RawEntry,
    data_len: u64,
) -> Result<(TensorInfo, u64, u64), ModelError> {
    let fault = |problem: String| ModelError::Tensor {
        file: file.to_string(),
        tensor: tensor.clone(),
        problem,
    };
    if let Some(field) = raw.twice {
        return Err(fault(format!(
            "has `{field}` twice; expected each field once"
        )));
    }
    let dtype = raw
        .dtype
        .ok_or_else(|| fault("has no `dtype` string; expected e.g. \"BF16\"".to_string()))?;
    let (dtype, size) = known_dtype(&dtype).ok_or_else(|| {
        fault(format!(
            "has dtype `{dtype}`, which is not known; expected one of {}",
            DTYPES.map(|(d, _)| d).join(", ")
        ))
    })?;
    let shape = raw
        .shape
        .ok_or_else(|| fault("has no `shape` array; expected e.g. [4096, 4096]".to_string()))?;
    let elements = match &shape.elements {
        Ok(elements) => *elements,
        Err(ShapeFault::Entry(dim)) => {
            return Err(fault(format!(
                "has a shape entry `{dim}`; expected whole numbers of 0 or more"
            )));
        }
        Err(ShapeFault::Overflow) => {
            return Err(fault(
                "has a shape whose element count exceeds 2^64".to_string(),
            ));
        }
    };
    let (begin, end) = raw.offsets.ok_or_else(|| {
        fault("has no `data_offsets` pair of whole numbers; expected [begin, end]".into())
    })?;
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
            "has shape {shape} of {dtype} ({want} bytes) but data_offsets [{begin}, {end}] span {} \
             bytes; expected them to agree",
            end - begin
        )));
    }
    Ok((
        TensorInfo {
            name: tensor,
            dtype,
            elements,
            bytes: end - begin,
        },
        begin,
        end,
    ))
}

/// What the format requires of the spans, the `safetensors` crate's rule: sorted by offsets, each
/// starts where the one before it ends, the first at 0 and the last at the end of the data
/// (`data_len`), so every byte of data is one tensor's. A gap is data no tensor claims: a
/// truncated or doctored header that the library would refuse to load, and bytes this tool would
/// not count. The first fault found, in this order: two tensors sharing bytes ([`overlap`]), a
/// gap (named by the tensors on each side), an empty tensor inside another's bytes. `spans` are
/// (begin, end, index into `tensors`), each already within the data.
pub(crate) fn layout(
    file: &str,
    tensors: &[TensorInfo],
    mut spans: Vec<(u64, u64, usize)>,
    data_len: u64,
) -> Option<ModelError> {
    spans.sort_unstable();
    if let Some(fault) = overlap(file, tensors, &spans) {
        return Some(fault);
    }
    const RULE: &str = "expected the tensors to cover the data exactly, one after another from \
                        byte 0 to its end, as the safetensors format requires";
    let fault = |i: usize, problem: String| {
        Some(ModelError::Tensor {
            file: file.to_string(),
            tensor: tensors[i].name.clone(),
            problem,
        })
    };
    // The non-empty spans, now disjoint and in order: each must start where the last ended.
    let mut reached = 0u64;
    let mut last: Option<usize> = None;
    for &(begin, end, i) in spans.iter().filter(|(b, e, _)| b < e) {
        if begin > reached {
            return fault(
                i,
                match last {
                    Some(a) => format!(
                        "starts at byte {begin} of the data but tensor `{}` before it ends at \
                         byte {reached}: bytes {reached} to {begin} belong to no tensor; {RULE}",
                        tensors[a].name
                    ),
                    None => format!(
                        "is the first tensor and starts at byte {begin} of the data: bytes 0 to \
                         {begin} belong to no tensor; {RULE}"
                    ),
                },
            );
        }
        reached = end;
        last = Some(i);
    }
    if reached < data_len {
        return match last {
            Some(a) => fault(
                a,
                format!(
                    "is the last tensor and ends at byte {reached}, but the file holds {data_len} \
                     bytes of tensor data: bytes {reached} to {data_len} belong to no tensor; {RULE}"
                ),
            ),
            None => Some(ModelError::Data {
                file: file.to_string(),
                problem: format!(
                    "the safetensors header gives no tensor any byte, but the file holds \
                     {data_len} bytes of tensor data; {RULE}"
                ),
            }),
        };
    }
    // An empty tensor sits between two others (or at either end), never inside one: the
    // library reads the spans in order, and one at byte k inside [b, e) breaks the chain.
    // (The non-empty spans are sorted and disjoint: the one that could hold byte k is the last
    // that starts before it, found by bisection, so a header of many tensors stays linear.)
    let full: Vec<(u64, u64, usize)> = spans.iter().copied().filter(|(b, e, _)| b < e).collect();
    for &(at, _, i) in spans.iter().filter(|(b, e, _)| b == e) {
        let before = full.partition_point(|(b, _, _)| *b < at);
        if let Some(&(b, e, a)) = before.checked_sub(1).map(|j| &full[j])
            && at < e
        {
            return fault(
                i,
                format!(
                    "is empty at byte {at}, inside tensor `{}` at [{b}, {e}]; expected an empty \
                     tensor between two others, as the safetensors format requires",
                    tensors[a].name
                ),
            );
        }
    }
    None
}

/// The first tensor whose bytes are another's. `spans` are (begin, end, index into `tensors`),
/// sorted. Each span must start at or after the furthest end seen so far (not only the previous
/// span's: one long tensor can cover several). Empty spans are skipped: they hold no bytes, so
/// they can share none, and skipping them everywhere keeps them from hiding an overlap between
/// the spans around them.
fn overlap(file: &str, tensors: &[TensorInfo], spans: &[(u64, u64, usize)]) -> Option<ModelError> {
    let mut furthest: Option<(u64, u64, usize)> = None;
    for &(begin, end, i) in spans {
        if begin == end {
            continue;
        }
        if let Some((a_begin, a_end, a)) = furthest
            && begin < a_end
        {
            return Some(ModelError::Tensor {
                file: file.to_string(),
                tensor: tensors[i].name.clone(),
                problem: format!(
                    "has data_offsets [{begin}, {end}] overlapping tensor `{}` at [{a_begin}, \
                     {a_end}]; expected each tensor's bytes to be its own",
                    tensors[a].name
                ),
            });
        }
        if furthest.is_none_or(|(_, a_end, _)| end > a_end) {
            furthest = Some((begin, end, i));
        }
    }
    None
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

    /// Issue 27: a zero-length tensor between two overlapping ones hid the overlap (only
    /// neighbours were compared): 1,200 parameters counted in 1,000 bytes.
    #[test]
    fn an_empty_tensor_does_not_hide_an_overlap() {
        let err = header(
            r#"{"big":{"dtype":"U8","shape":[1000],"data_offsets":[0,1000]},
                "z":{"dtype":"U8","shape":[0],"data_offsets":[500,500]},
                "c":{"dtype":"U8","shape":[100],"data_offsets":[600,700]},
                "d":{"dtype":"U8","shape":[100],"data_offsets":[700,800]}}"#,
            1000,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "m.safetensors: tensor `c` has data_offsets [600, 700] overlapping tensor `big` at \
             [0, 1000]; expected each tensor's bytes to be its own"
        );
        // A tensor after the long one's end, and empty tensors between two others or at either
        // end of the data, are not overlaps.
        let h = header(
            r#"{"big":{"dtype":"U8","shape":[1000],"data_offsets":[0,1000]},
                "z":{"dtype":"U8","shape":[0],"data_offsets":[1000,1000]},
                "e":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},
                "f":{"dtype":"U8","shape":[0],"data_offsets":[1100,1100]},
                "c":{"dtype":"U8","shape":[100],"data_offsets":[1000,1100]}}"#,
            1100,
        )
        .unwrap();
        assert_eq!(h.elements_by_dtype()["U8"], 1100);
        // An empty tensor inside another's bytes breaks the format's chain of spans.
        let err = header(
            r#"{"big":{"dtype":"U8","shape":[1000],"data_offsets":[0,1000]},
                "z":{"dtype":"U8","shape":[0],"data_offsets":[500,500]}}"#,
            1000,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "m.safetensors: tensor `z` is empty at byte 500, inside tensor `big` at [0, 1000]; \
             expected an empty tensor between two others, as the safetensors format requires"
        );
    }

    /// The `safetensors` crate's rule, as it is written there, to hold [`layout`] to: sorted by
    /// offsets, each span starts where the last ended, from 0, and the last ends at the data's end.
    fn library_accepts(spans: &[(u64, u64)], data_len: u64) -> bool {
        let mut sorted = spans.to_vec();
        sorted.sort_unstable();
        let mut start = 0;
        for (s, e) in sorted {
            if s != start || e < s {
                return false;
            }
            start = e;
        }
        start == data_len
    }

    fn checked(spans: &[(u64, u64)], data_len: u64) -> Option<ModelError> {
        let tensors: Vec<TensorInfo> = (0..spans.len())
            .map(|i| TensorInfo {
                name: format!("t{i}"),
                dtype: "U8",
                elements: spans[i].1 - spans[i].0,
                bytes: spans[i].1 - spans[i].0,
            })
            .collect();
        let with_index = spans
            .iter()
            .enumerate()
            .map(|(i, &(b, e))| (b, e, i))
            .collect();
        layout("m.safetensors", &tensors, with_index, data_len)
    }

    proptest::proptest! {
        /// Arbitrary spans within the data: accepted exactly when the library would load them.
        #[test]
        fn spans_are_accepted_exactly_as_the_library_accepts_them(
            raw in proptest::collection::vec((0u64..24, 0u64..6), 0..7),
            data_len in 0u64..30,
        ) {
            let spans: Vec<(u64, u64)> = raw
                .iter()
                .map(|&(b, len)| (b.min(data_len), (b + len).min(data_len)))
                .collect();
            let fault = checked(&spans, data_len);
            proptest::prop_assert_eq!(fault.is_none(), library_accepts(&spans, data_len), "{:?}", fault);
        }

        /// A valid layout in any order is read; a gap opened anywhere in it is refused, naming
        /// the tensors on each side of it (or the one after it, at the start; or the last one,
        /// at the end), and the bytes nobody claims.
        #[test]
        fn a_gap_anywhere_is_refused_naming_its_neighbours(
            sizes in proptest::collection::vec(1u64..50, 1..12),
            at in 0usize..12,
            gap in 1u64..100,
            rotate in 0usize..12,
        ) {
            let mut spans = Vec::new();
            let mut offset = 0;
            for (i, size) in sizes.iter().enumerate() {
                if i == at {
                    offset += gap;
                }
                spans.push((offset, offset + size));
                offset += size;
            }
            let at = at.min(sizes.len());
            let data_len = offset + if at == sizes.len() { gap } else { 0 };
            let intact: Vec<(u64, u64)> = {
                let mut o = 0;
                sizes.iter().map(|s| { o += s; (o - s, o) }).collect()
            };
            let mut shuffled = intact.clone();
            shuffled.rotate_left(rotate % sizes.len());
            let total: u64 = sizes.iter().sum();
            let whole = checked(&shuffled, total);
            proptest::prop_assert!(whole.is_none(), "{:?}", whole);
            let err = checked(&spans, data_len).expect("a gap is refused").to_string();
            let (from, to) = if at == sizes.len() {
                (data_len - gap, data_len)
            } else {
                (spans[at].0 - gap, spans[at].0)
            };
            let bytes = format!("bytes {from} to {to} belong to no tensor");
            proptest::prop_assert!(err.contains(&bytes), "{}", err);
            if at < sizes.len() {
                let after = format!("tensor `t{at}` ");
                proptest::prop_assert!(err.contains(&after), "{}", err);
            }
            if at > 0 {
                let before = format!("tensor `t{}`", at - 1);
                proptest::prop_assert!(err.contains(&before), "{}", err);
            }
        }
    }

    /// Issue 32: data that no tensor claims (a gap between two tensors, before the first or
    /// after the last) is refused, naming the tensors on each side; the spans that do cover the
    /// data exactly, in any order in the header, are read.
    #[test]
    fn a_gap_in_the_data_is_refused_naming_the_tensors_around_it() {
        let rule = "expected the tensors to cover the data exactly, one after another from byte \
                    0 to its end, as the safetensors format requires";
        for (json, data_len, says) in [
            (
                r#"{"b":{"dtype":"U8","shape":[10],"data_offsets":[20,30]},
                    "a":{"dtype":"U8","shape":[10],"data_offsets":[0,10]}}"#,
                30,
                format!(
                    "m.safetensors: tensor `b` starts at byte 20 of the data but tensor `a` \
                     before it ends at byte 10: bytes 10 to 20 belong to no tensor; {rule}"
                ),
            ),
            (
                r#"{"a":{"dtype":"U8","shape":[10],"data_offsets":[4,14]}}"#,
                14,
                format!(
                    "m.safetensors: tensor `a` is the first tensor and starts at byte 4 of the \
                     data: bytes 0 to 4 belong to no tensor; {rule}"
                ),
            ),
            (
                r#"{"a":{"dtype":"U8","shape":[10],"data_offsets":[0,10]},
                    "e":{"dtype":"U8","shape":[0],"data_offsets":[10,10]}}"#,
                16,
                format!(
                    "m.safetensors: tensor `a` is the last tensor and ends at byte 10, but the \
                     file holds 16 bytes of tensor data: bytes 10 to 16 belong to no tensor; \
                     {rule}"
                ),
            ),
            (
                r#"{"__metadata__":{"format":"pt"}}"#,
                8,
                format!(
                    "m.safetensors: the safetensors header gives no tensor any byte, but the \
                     file holds 8 bytes of tensor data; {rule}"
                ),
            ),
        ] {
            let err = header(json, data_len).unwrap_err().to_string();
            assert_eq!(err, says);
        }
        let h = header(
            r#"{"b":{"dtype":"F16","shape":[5],"data_offsets":[10,20]},
                "a":{"dtype":"U8","shape":[10],"data_offsets":[0,10]}}"#,
            20,
        )
        .unwrap();
        assert_eq!(h.tensors.len(), 2);
        assert!(header("{}", 0).unwrap().tensors.is_empty());
    }

    /// Issue 27: a name given twice was collapsed by the JSON reader (10 elements counted, not
    /// 1,010); it is refused, as are a field or `__metadata__` given twice.
    #[test]
    fn a_name_given_twice_is_refused_naming_it() {
        let err = header(
            r#"{"w":{"dtype":"U8","shape":[1000],"data_offsets":[0,1000]},
                "w":{"dtype":"U8","shape":[10],"data_offsets":[1000,1010]}}"#,
            1010,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "m.safetensors: tensor `w` is named twice in the header; expected each tensor once \
             (a JSON reader would keep only one of the two)"
        );
        let err = header(
            r#"{"w":{"dtype":"U8","shape":[10],"shape":[4],"data_offsets":[0,4]}}"#,
            10,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("tensor `w` has `shape` twice"), "{err}");
        let err = header(r#"{"__metadata__":{},"__metadata__":{}}"#, 0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("`__metadata__` twice"), "{err}");
    }

    /// The streaming reader gives the tree reader's answers on what it no longer builds.
    #[test]
    fn odd_values_read_as_the_tree_reader_read_them() {
        let h = header(
            r#"{"__metadata__":[1,{"a":[2]}],
                "a":{"extra":{"x":[1,2]},"data_offsets":[0,6],"shape":[3],"dtype":"F16"},
                "b":{"dtype":"F16","shape":[],"data_offsets":[6,8]}}"#,
            8,
        )
        .unwrap();
        assert_eq!(
            h.tensors,
            [
                TensorInfo {
                    name: "a".into(),
                    dtype: "F16",
                    elements: 3,
                    bytes: 6
                },
                TensorInfo {
                    name: "b".into(),
                    dtype: "F16",
                    elements: 1,
                    bytes: 2
                },
            ]
        );
        for (json, says) in [
            (r#"{"x":[1,2]}"#, "has no `dtype` string"),
            (r#"{"x":{"dtype":7}}"#, "has no `dtype` string"),
            (
                r#"{"x":{"dtype":"F16","shape":{"a":1}}}"#,
                "has no `shape` array",
            ),
            (
                r#"{"x":{"dtype":"F16","shape":[2.5],"data_offsets":[0,4]}}"#,
                "has a shape entry `2.5`",
            ),
            (
                r#"{"x":{"dtype":"F16","shape":["2"],"data_offsets":[0,4]}}"#,
                "has a shape entry `\"2\"`",
            ),
            (
                r#"{"x":{"dtype":"F16","shape":[2],"data_offsets":[0,4,8]}}"#,
                "has no `data_offsets` pair",
            ),
            (
                r#"{"x":{"dtype":"F16","shape":[2,2],"data_offsets":[0,4]}}"#,
                "has shape [2,2] of F16 (8 bytes)",
            ),
        ] {
            let err = header(json, 10).unwrap_err().to_string();
            assert!(err.contains(says), "wanted {says:?} in {err}");
        }
        for json in ["{} x", "{\"x\":"] {
            let err = header(json, 0).unwrap_err().to_string();
            assert!(
                err.contains("is not valid JSON (safetensors header: "),
                "{err}"
            );
        }
    }

    /// A file that holds fewer bytes than its header length says, or bad JSON, read from disk.
    #[test]
    fn a_file_is_read_as_a_stream() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.safetensors");
        let json = br#"{"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}  "#;
        let mut bytes = (json.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(json);
        bytes.extend_from_slice(&[0; 4]);
        std::fs::write(&path, &bytes).unwrap();
        let h = read_header(&path, "m.safetensors").unwrap();
        assert_eq!(h.bytes_read, 8 + json.len() as u64);
        assert_eq!(h.tensors[0].elements, 2);
        bytes[8] = b'[';
        std::fs::write(&path, &bytes).unwrap();
        let err = read_header(&path, "m.safetensors").unwrap_err().to_string();
        assert!(err.contains("is not valid JSON"), "{err}");
    }
}

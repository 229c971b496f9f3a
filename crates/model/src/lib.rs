//! Reads a model folder without loading the model: the exact parameter count and weight bytes
//! from the safetensors headers (never the tensor data), or the count from `config.json` for the
//! architectures whose formula is known, with the tensors behind it (which a quantised
//! checkpoint packs, which it keeps at 16 bits: [`quant`]) and the attention geometry that sizes
//! the KV cache (grouped-query, sliding or chunked windows, multi-head latent attention).
//!
//! Not here: the bytes and packages those facts lead to (`rent::memory`, `rent::fit`).
//!
//! ```no_run
//! let model = model::inspect(std::path::Path::new("data/models/llama-3.1-8b"))?;
//! println!("{} parameters", model.parameters);
//! # Ok::<(), model::ModelError>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod config;
mod error;
pub mod hub;
pub mod quant;
pub mod safetensors;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

pub use config::{Architecture, Attention, Part, Role, SlidingWindow};
pub use error::ModelError;
pub use quant::{Grouping, Quantization, Scheme, Split};

/// The largest config.json read (they are a few kilobytes).
pub const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;
/// The largest model.safetensors.index.json read (a 671B model's is about 9 MB).
pub const MAX_INDEX_BYTES: u64 = 64 * 1024 * 1024;
/// The index of a sharded checkpoint.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// Where the parameter count came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ParametersSource {
    /// The sum of the tensors' elements in the safetensors headers.
    Safetensors,
    /// The architecture's formula applied to config.json.
    Config,
}

/// What a model folder says about the model's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Model {
    /// The architecture from config.json, when there is one whose formula is known.
    pub architecture: Option<Architecture>,
    /// The architecture's name from config.json even when its formula is unknown.
    pub architecture_name: Option<String>,
    /// Where `parameters` came from.
    pub source: ParametersSource,
    /// Every parameter (with safetensors: every stored tensor element).
    pub parameters: u64,
    /// Parameters used per token (less than `parameters` for a mixture of experts).
    pub active_parameters: u64,
    /// Stored bytes per safetensors dtype (empty without safetensors files).
    pub weight_bytes_by_dtype: BTreeMap<String, u64>,
    /// Stored elements per safetensors dtype (empty without safetensors files).
    pub elements_by_dtype: BTreeMap<String, u64>,
    /// The safetensors files whose headers were read.
    pub files: Vec<String>,
    /// Bytes read from those files (their headers only).
    pub header_bytes_read: u64,
}

impl Model {
    /// The stored weight bytes, exact, when safetensors files were read.
    pub fn stored_weight_bytes(&self) -> Option<u128> {
        (self.source == ParametersSource::Safetensors).then(|| {
            self.weight_bytes_by_dtype
                .values()
                .map(|b| u128::from(*b))
                .sum()
        })
    }

    /// Bits per element of the dtype holding most bytes in the safetensors files, else of the
    /// config's `torch_dtype`.
    pub fn native_bits(&self) -> Option<u32> {
        let from_files = self
            .weight_bytes_by_dtype
            .iter()
            .max_by_key(|(_, bytes)| **bytes)
            .and_then(|(dtype, _)| safetensors::dtype_bytes(dtype))
            .map(|b| b as u32 * 8);
        from_files.or_else(|| {
            let dtype = self.architecture.as_ref()?.dtype.as_deref()?;
            torch_dtype_bits(dtype)
        })
    }
}

/// Bits per element of a `torch_dtype` value.
pub fn torch_dtype_bits(dtype: &str) -> Option<u32> {
    match dtype.trim_start_matches("torch.") {
        "float32" | "float" => Some(32),
        "bfloat16" | "float16" | "half" => Some(16),
        "float64" | "double" => Some(64),
        "float8_e4m3fn" | "float8_e5m2" | "int8" | "uint8" => Some(8),
        _ => None,
    }
}

/// Reads the model at `path`: a folder (config.json and/or *.safetensors, sharded or not) or the
/// path of a config.json.
pub fn inspect(path: &Path) -> Result<Model, ModelError> {
    let shown = path.display().to_string();
    let (folder, config_path) = if path.is_dir() {
        (path.to_path_buf(), path.join("config.json"))
    } else if path.exists() {
        // A file, or something else that the reads below refuse by what it is (a FIFO, a
        // device), rather than "no such file".
        let folder = path
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        if path.extension().is_some_and(|e| e == "safetensors") {
            return from_safetensors(&[(path.to_path_buf(), shown)], None, None);
        }
        (folder, path.to_path_buf())
    } else {
        return Err(ModelError::Read {
            file: shown,
            reason: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or folder"),
        });
    };
    let config_name = config_path.display().to_string();
    // `exists`, not `is_file`: a config.json that is a FIFO or a device is refused by the read
    // with a sentence saying what it is, not taken for a missing file.
    let config_text = if config_path.exists() {
        Some(read_bounded(
            &config_path,
            &config_name,
            MAX_CONFIG_BYTES,
            "config.json",
        )?)
    } else {
        None
    };
    let architecture_name = config_text.as_deref().and_then(|t| {
        let v: Value = serde_json::from_str(t).ok()?;
        v.get("architectures")?
            .as_array()?
            .first()?
            .as_str()
            .map(str::to_string)
    });
    // Safetensors only from a folder: a config.json path asks for the config's count.
    let shards = if path.is_dir() {
        shard_files(&folder)?
    } else {
        None
    };
    match (shards, config_text) {
        (Some((files, index)), config) => {
            // The architecture, when known, gives the geometry and the experts; an unknown one
            // does not stop a count that the headers give exactly.
            let architecture = match config.as_deref().map(|t| config::parse(t, &config_name)) {
                Some(Ok(a)) => Some(a),
                Some(Err(ModelError::UnknownArchitecture { .. })) | None => None,
                Some(Err(other)) => return Err(other),
            };
            let mut model = from_safetensors(&files, index, architecture)?;
            model.architecture_name = architecture_name;
            Ok(model)
        }
        (None, Some(text)) => {
            let a = config::parse(&text, &config_name)?;
            Ok(Model {
                architecture_name: Some(a.name.clone()),
                source: ParametersSource::Config,
                parameters: a.parameters,
                active_parameters: a.active_parameters,
                architecture: Some(a),
                weight_bytes_by_dtype: BTreeMap::new(),
                elements_by_dtype: BTreeMap::new(),
                files: Vec::new(),
                header_bytes_read: 0,
            })
        }
        (None, None) => Err(ModelError::NoModel { path: shown }),
    }
}

/// An index's shards, or every *.safetensors file of the folder; `None` when there is none.
#[allow(clippy::type_complexity)]
fn shard_files(
    folder: &Path,
) -> Result<
    Option<(
        Vec<(PathBuf, String)>,
        Option<(String, HashMap<String, String>)>,
    )>,
    ModelError,
> {
    let index_path = folder.join(INDEX_FILE);
    if index_path.is_file() {
        let name = index_path.display().to_string();
        let text = read_bounded(&index_path, &name, MAX_INDEX_BYTES, "safetensors index")?;
        let map = parse_index(&text, &name)?;
        let shards: BTreeSet<&String> = map.values().collect();
        let mut files = Vec::new();
        for shard in shards {
            let path = folder.join(shard);
            if !path.is_file() {
                return Err(ModelError::Index {
                    file: name,
                    problem: format!(
                        "names the shard `{shard}`, which is not in the folder; expected every \
                         shard the weight_map names beside the index"
                    ),
                });
            }
            files.push((path.clone(), path.display().to_string()));
        }
        return Ok(Some((files, Some((name, map)))));
    }
    let entries = std::fs::read_dir(folder).map_err(|reason| ModelError::Read {
        file: folder.display().to_string(),
        reason,
    })?;
    let mut files: Vec<(PathBuf, String)> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|reason| ModelError::Read {
            file: folder.display().to_string(),
            reason,
        })?;
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "safetensors") && path.is_file() {
            let shown = path.display().to_string();
            files.push((path, shown));
        }
    }
    files.sort();
    Ok((!files.is_empty()).then_some((files, None)))
}

/// Reads an index's weight_map: tensor name -> shard file name (a plain name in the folder).
fn parse_index(text: &str, name: &str) -> Result<HashMap<String, String>, ModelError> {
    let value: Value = serde_json::from_str(text).map_err(|err| ModelError::Json {
        file: name.to_string(),
        message: err.to_string(),
        expected: "an object with a `weight_map` of tensor names to shard files",
    })?;
    let map = value
        .get("weight_map")
        .and_then(Value::as_object)
        .ok_or_else(|| ModelError::Index {
            file: name.to_string(),
            problem: "has no `weight_map` object; expected tensor names mapped to shard files"
                .to_string(),
        })?;
    let mut out = HashMap::with_capacity(map.len());
    for (tensor, shard) in map {
        let shard = shard.as_str().ok_or_else(|| ModelError::Index {
            file: name.to_string(),
            problem: format!("maps `{tensor}` to `{shard}`; expected a shard file name"),
        })?;
        let plain = !shard.is_empty()
            && !shard.contains(['/', '\\'])
            && shard != ".."
            && shard != "."
            && shard.ends_with(".safetensors");
        if !plain {
            return Err(ModelError::Index {
                file: name.to_string(),
                problem: format!(
                    "maps `{tensor}` to `{shard}`; expected the name of a .safetensors file in \
                     the same folder (no path)"
                ),
            });
        }
        out.insert(tensor.clone(), shard.to_string());
    }
    if out.is_empty() {
        return Err(ModelError::Index {
            file: name.to_string(),
            problem: "has an empty weight_map; expected at least one tensor".to_string(),
        });
    }
    Ok(out)
}

/// Sums the headers of `files`; with an index, every tensor must be in the shard it names.
fn from_safetensors(
    files: &[(PathBuf, String)],
    index: Option<(String, HashMap<String, String>)>,
    architecture: Option<Architecture>,
) -> Result<Model, ModelError> {
    // (bytes, elements) per dtype; each tensor's name is kept once, with the file it is in.
    let mut by_dtype: BTreeMap<&'static str, (u64, u64)> = BTreeMap::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut parameters: u64 = 0;
    let mut header_bytes_read = 0;
    for (file, (path, shown)) in files.iter().enumerate() {
        let header = safetensors::read_header(path, shown)?;
        header_bytes_read += header.bytes_read;
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for t in header.tensors {
            if let Some((index_name, map)) = &index
                && map.get(&t.name) != Some(&file_name)
            {
                return Err(ModelError::Index {
                    file: index_name.clone(),
                    problem: format!(
                        "does not map tensor `{}` to {shown}, which holds it; expected the \
                         index to match the shards",
                        t.name
                    ),
                });
            }
            if let Some(&other) = seen.get(&t.name) {
                return Err(ModelError::Tensor {
                    file: shown.clone(),
                    tensor: t.name,
                    problem: format!("is also in {}; expected each tensor once", files[other].1),
                });
            }
            let overflow = || ModelError::Tensor {
                file: shown.clone(),
                tensor: t.name.clone(),
                problem: "brings the total beyond 2^64 elements or bytes".to_string(),
            };
            parameters = parameters.checked_add(t.elements).ok_or_else(overflow)?;
            let (bytes, elements) = by_dtype.entry(t.dtype).or_insert((0, 0));
            *bytes = bytes.checked_add(t.bytes).ok_or_else(overflow)?;
            *elements += t.elements;
            seen.insert(t.name, file);
        }
    }
    let weight_bytes_by_dtype = by_dtype
        .iter()
        .map(|(dtype, (bytes, _))| (dtype.to_string(), *bytes))
        .collect();
    let elements_by_dtype = by_dtype
        .iter()
        .map(|(dtype, (_, elements))| (dtype.to_string(), *elements))
        .collect();
    if let Some((index_name, map)) = &index
        && let Some(missing) = map.keys().find(|k| !seen.contains_key(*k))
    {
        return Err(ModelError::Index {
            file: index_name.clone(),
            problem: format!(
                "maps tensor `{missing}` to {}, whose header does not hold it; expected the index \
                 to match the shards",
                map[missing]
            ),
        });
    }
    // A mixture of experts keeps all experts in memory; per token only some run. The headers
    // do not say which tensors are experts, so the inactive share comes from the config's formula.
    let active_parameters = match &architecture {
        Some(a) if a.parameters > a.active_parameters => {
            parameters.saturating_sub(a.parameters - a.active_parameters)
        }
        _ => parameters,
    };
    Ok(Model {
        architecture_name: architecture.as_ref().map(|a| a.name.clone()),
        architecture,
        source: ParametersSource::Safetensors,
        parameters,
        active_parameters,
        weight_bytes_by_dtype,
        elements_by_dtype,
        files: files.iter().map(|(_, s)| s.clone()).collect(),
        header_bytes_read,
    })
}

/// Reads a JSON file of at most `limit` bytes.
fn read_bounded(
    path: &Path,
    name: &str,
    limit: u64,
    what: &'static str,
) -> Result<String, ModelError> {
    let io = |reason| ModelError::Read {
        file: name.to_string(),
        reason,
    };
    let file = lab_io::files::open_input(path).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > limit {
        let size = std::fs::metadata(path)
            .map(|m| m.len())
            .unwrap_or(limit + 1);
        return Err(ModelError::FileTooLarge {
            file: name.to_string(),
            size,
            limit,
            what,
        });
    }
    String::from_utf8(bytes).map_err(|_| ModelError::Json {
        file: name.to_string(),
        message: "it is not UTF-8 text".to_string(),
        expected: "a JSON file",
    })
}

//! Why a model folder, config or safetensors header cannot be used. Every message is one sentence
//! that names the file (and the tensor or field) and says what would be accepted.

/// A model that cannot be read as asked.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The OS refused to open or read a file.
    #[error("cannot read {file}: {reason}")]
    Read {
        /// The file.
        file: String,
        /// The OS error, in the message itself (not a `source`, which would print it twice).
        reason: std::io::Error,
    },
    /// Neither a config.json nor a safetensors file where one was expected.
    #[error(
        "{path} holds no config.json and no *.safetensors file; expected a model folder (as \
         downloaded from a model hub) or the path of its config.json"
    )]
    NoModel {
        /// The path given.
        path: String,
    },
    /// A JSON file larger than its bound.
    #[error("{file} is {size} bytes, more than the {limit} bytes accepted for a {what}")]
    FileTooLarge {
        /// The file.
        file: String,
        /// Its size.
        size: u64,
        /// The bound.
        limit: u64,
        /// What kind of file.
        what: &'static str,
    },
    /// Not JSON, or not the JSON object expected.
    #[error("{file} is not valid JSON ({message}); expected {expected}")]
    Json {
        /// The file.
        file: String,
        /// What the parser said.
        message: String,
        /// What the file should hold.
        expected: &'static str,
    },
    /// A config field that is missing or not a usable value.
    #[error("{file}: `{field}` {problem}")]
    Field {
        /// The file.
        file: String,
        /// The field (dotted for nested ones, e.g. `text_config.hidden_size`).
        field: String,
        /// What is wrong and what would be accepted.
        problem: String,
    },
    /// An architecture whose parameter formula is not known.
    #[error(
        "{file}: architecture `{name}` is not one whose parameters can be counted from config.json \
         alone (known: {}); pass the model folder with its *.safetensors files instead, whose \
         headers give the exact count", .known.join(", ")
    )]
    UnknownArchitecture {
        /// The file.
        file: String,
        /// The architecture named by the config.
        name: String,
        /// The architectures this crate counts.
        known: Vec<&'static str>,
    },
    /// Counting overflowed: the config's sizes are beyond any real model.
    #[error(
        "{file}: the sizes in this config give more than 2^64 parameters; expected the sizes of a \
         real model"
    )]
    Overflow {
        /// The file.
        file: String,
    },
    /// A safetensors header length over the bound.
    #[error(
        "{file}: the safetensors header claims {length} bytes, more than the 100000000 bytes \
         accepted; this is not a safetensors file, or a hostile one"
    )]
    HeaderTooLarge {
        /// The file.
        file: String,
        /// The claimed length.
        length: u64,
    },
    /// A safetensors file too short for its own header.
    #[error(
        "{file}: the safetensors header claims {length} bytes but the file holds {available} after \
         the 8-byte length; expected a complete safetensors file"
    )]
    HeaderBeyondFile {
        /// The file.
        file: String,
        /// The claimed length.
        length: u64,
        /// What the file has.
        available: u64,
    },
    /// One tensor entry of a safetensors header that cannot be right.
    #[error("{file}: tensor `{tensor}` {problem}")]
    Tensor {
        /// The file.
        file: String,
        /// The tensor's name.
        tensor: String,
        /// What is wrong and what would be accepted.
        problem: String,
    },
    /// Tensor data that no tensor of the header claims (with no tensor to name).
    #[error("{file}: {problem}")]
    Data {
        /// The file.
        file: String,
        /// What is wrong and what would be accepted.
        problem: String,
    },
    /// A `model.safetensors.index.json` that does not describe the folder.
    #[error("{file}: {problem}")]
    Index {
        /// The index file.
        file: String,
        /// What is wrong and what would be accepted.
        problem: String,
    },
}

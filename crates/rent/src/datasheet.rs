//! The datasheet table: what each GPU model of the catalogue should deliver, by its vendor's
//! published figures, so that a probe can say how much of it a rented card delivers.
//!
//! The format is `data/gpu-datasheet.csv` (embedded as the default; `--datasheet FILE` replaces
//! it): one row per GPU model and form factor (`gpu`, the catalogue slug, with a `variant` such as
//! `sxm` or `pcie`), the names the CUDA driver gives that model (`cuda_names`, `|`-separated; how a
//! detected GPU finds its row), its memory bandwidth, its **dense** peak throughput per data type
//! (vendors print the sparse figure, twice the dense one, in large type: a row's `source` says
//! when its dense figure is derived that way), its PCIe link and its NVLink, and the public source
//! of every figure. It is validated as the catalogue is: the header, every field's type, unique
//! rows and names, each fault reported with the file, the row (header = row 1) and the column; a
//! file is bounded ([`MAX_DATASHEET_BYTES`]) and read in one pass.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::catalogue::Catalogue;
use crate::field::FieldProblem;
use crate::rows::{LineCounter, line_of};

/// The columns, in the order the bundled file uses.
pub const COLUMNS: [&str; 15] = [
    "gpu",
    "variant",
    "model",
    "cuda_names",
    "memory_bandwidth_gb_s",
    "fp32_tflops",
    "tf32_tflops",
    "fp16_tflops",
    "bf16_tflops",
    "fp8_tflops",
    "pcie_generation",
    "pcie_lanes",
    "nvlink_gb_s",
    "nvlink_links",
    "source",
];

/// The largest datasheet file read (1 MiB: the bundled table takes 9 KB).
pub const MAX_DATASHEET_BYTES: u64 = 1024 * 1024;

/// How the bundled table is named in messages and documents.
pub const EMBEDDED_NAME: &str = "embedded";

/// The bundled table, `data/gpu-datasheet.csv`.
pub const EMBEDDED_CSV: &str = include_str!("../../../data/gpu-datasheet.csv");

/// A dense matrix product's data type, as the probe runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GemmKind {
    /// float32 inputs, strict float32 products (no tensor cores on NVIDIA GPUs).
    Float32,
    /// float32 inputs, products in TF32 on the tensor cores.
    Tf32,
    /// float16 inputs, float32 accumulation.
    Float16,
    /// bfloat16 inputs, float32 accumulation.
    Bfloat16,
    /// FP8 (E4M3) inputs, float32 accumulation, bfloat16 output.
    Float8E4m3,
}

impl GemmKind {
    /// Every kind, in the order a probe runs them.
    pub const ALL: [GemmKind; 5] = [
        GemmKind::Float32,
        GemmKind::Tf32,
        GemmKind::Float16,
        GemmKind::Bfloat16,
        GemmKind::Float8E4m3,
    ];

    /// The name in documents and on screen.
    pub fn name(self) -> &'static str {
        match self {
            GemmKind::Float32 => "float32",
            GemmKind::Tf32 => "tf32",
            GemmKind::Float16 => "float16",
            GemmKind::Bfloat16 => "bfloat16",
            GemmKind::Float8E4m3 => "float8_e4m3",
        }
    }

    /// The datasheet column this kind is compared with.
    pub fn column(self) -> &'static str {
        match self {
            GemmKind::Float32 => "fp32_tflops",
            GemmKind::Tf32 => "tf32_tflops",
            GemmKind::Float16 => "fp16_tflops",
            GemmKind::Bfloat16 => "bf16_tflops",
            GemmKind::Float8E4m3 => "fp8_tflops",
        }
    }
}

impl std::fmt::Display for GemmKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One GPU model and form factor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasheetRow {
    /// The catalogue slug (`h100-sxm`).
    pub gpu: String,
    /// The form factor or edition (`sxm`, `pcie`), unique within a slug.
    pub variant: String,
    /// Display name.
    pub model: String,
    /// The names `cuDeviceGetName` gives this model (empty for a GPU CUDA cannot drive).
    pub cuda_names: Vec<String>,
    /// Peak memory bandwidth, GB/s (10^9 bytes per second).
    pub memory_bandwidth_gb_s: f64,
    /// Dense float32 (non-tensor) peak, TFLOP/s.
    pub fp32_tflops: f64,
    /// Dense TF32 tensor peak.
    pub tf32_tflops: f64,
    /// Dense float16 tensor peak, float32 accumulation.
    pub fp16_tflops: f64,
    /// Dense bfloat16 tensor peak, float32 accumulation.
    pub bf16_tflops: f64,
    /// Dense FP8 tensor peak, where the model has FP8.
    pub fp8_tflops: Option<f64>,
    /// The PCIe generation the model is built for.
    pub pcie_generation: u32,
    /// Its lanes.
    pub pcie_lanes: u32,
    /// NVLink (or Infinity Fabric) bandwidth as the vendor states it, both directions together.
    pub nvlink_gb_s: Option<f64>,
    /// NVLink links every card of this form factor has active (none for optional bridges).
    pub nvlink_links: Option<u32>,
    /// Where each figure comes from, and which are derived.
    pub source: String,
    /// The row of the file (header = 1).
    #[serde(skip)]
    pub row: u64,
}

/// The usable bandwidth of one direction of a PCIe link, in GB/s: transfer rate x lanes x line
/// encoding / 8 (8b/10b up to Gen2, 128b/130b for Gen3 to Gen5, Gen6's FLIT of 242 payload bytes
/// in 256). Packet headers cost a few percent more, which is why a copy never reaches it.
pub fn pcie_gb_s(generation: u32, lanes: u32) -> Option<f64> {
    let (gt_s, encoding) = match generation {
        1 => (2.5, 8.0 / 10.0),
        2 => (5.0, 8.0 / 10.0),
        3 => (8.0, 128.0 / 130.0),
        4 => (16.0, 128.0 / 130.0),
        5 => (32.0, 128.0 / 130.0),
        6 => (64.0, 242.0 / 256.0),
        _ => return None,
    };
    (lanes > 0).then(|| gt_s * f64::from(lanes) * encoding / 8.0)
}

impl DatasheetRow {
    /// The dense peak for a product kind, TFLOP/s (`None`: the model has no such unit).
    pub fn tflops(&self, kind: GemmKind) -> Option<f64> {
        match kind {
            GemmKind::Float32 => Some(self.fp32_tflops),
            GemmKind::Tf32 => Some(self.tf32_tflops),
            GemmKind::Float16 => Some(self.fp16_tflops),
            GemmKind::Bfloat16 => Some(self.bf16_tflops),
            GemmKind::Float8E4m3 => self.fp8_tflops,
        }
    }

    /// One direction of the model's PCIe link, GB/s.
    pub fn pcie_gb_s_per_direction(&self) -> Option<f64> {
        pcie_gb_s(self.pcie_generation, self.pcie_lanes)
    }

    /// One direction of the model's NVLink, GB/s (half the bidirectional figure vendors print).
    pub fn nvlink_gb_s_per_direction(&self) -> Option<f64> {
        self.nvlink_gb_s.map(|b| b / 2.0)
    }

    /// Whether CUDA names a device of this model `name` (case and surrounding spaces ignored).
    pub fn matches(&self, name: &str) -> bool {
        let n = name.trim();
        self.cuda_names.iter().any(|c| c.eq_ignore_ascii_case(n))
    }
}

/// A validated datasheet table and the name it was loaded under.
#[derive(Debug, Clone, PartialEq)]
pub struct Datasheet {
    name: String,
    rows: Vec<DatasheetRow>,
}

/// A datasheet table that cannot be used; every variant names the file, and row and column where
/// there is one.
#[derive(Debug, thiserror::Error)]
pub enum DatasheetError {
    /// The file could not be read.
    #[error("cannot read the datasheet table {file}: {reason}")]
    Read {
        /// Path or name.
        file: String,
        /// The OS error.
        reason: std::io::Error,
    },
    /// Larger than [`MAX_DATASHEET_BYTES`].
    #[error(
        "the datasheet table {file} is larger than {MAX_DATASHEET_BYTES} bytes (1 MiB), the largest accepted; expected a CSV file of one row per GPU model"
    )]
    TooLarge {
        /// Path or name.
        file: String,
    },
    /// Not CSV text, or no header.
    #[error("the datasheet table {file}, row {row}: {message}")]
    Syntax {
        /// Path or name.
        file: String,
        /// Row where the reader stopped.
        row: u64,
        /// What is wrong.
        message: String,
    },
    /// A header column missing, unknown or repeated.
    #[error("the datasheet table {file}, row 1 (header), column `{column}`: {problem}; expected the columns {}", COLUMNS.join(","))]
    Header {
        /// Path or name.
        file: String,
        /// The column.
        column: String,
        /// `is missing`, `is not a datasheet column`, `appears twice`.
        problem: &'static str,
    },
    /// A bad field.
    #[error("the datasheet table {file}, row {row}, column `{column}`: {problem}")]
    Field {
        /// Path or name.
        file: String,
        /// Row (header = 1).
        row: u64,
        /// Column.
        column: String,
        /// What is wrong and what is expected.
        problem: String,
    },
    /// A header and no row.
    #[error("the datasheet table {file} has no rows; expected one row per GPU model")]
    NoRows {
        /// Path or name.
        file: String,
    },
}

impl Datasheet {
    /// The bundled table; it is validated by this crate's tests, so loading it cannot fail.
    pub fn embedded() -> Datasheet {
        match Datasheet::from_reader(EMBEDDED_NAME, EMBEDDED_CSV.as_bytes()) {
            Ok(d) => d,
            // Unreachable in a tested build: `the_bundled_table_is_valid` loads this file.
            Err(e) => panic!("the embedded datasheet table is invalid: {e}"),
        }
    }

    /// `--datasheet FILE` when given, else the bundled table: the one lookup every command that
    /// holds a GPU to its datasheet makes.
    pub fn load(path: Option<&Path>) -> Result<Datasheet, DatasheetError> {
        match path {
            Some(path) => Datasheet::from_path(path),
            None => Ok(Datasheet::embedded()),
        }
    }

    /// Loads and validates a file.
    pub fn from_path(path: &Path) -> Result<Datasheet, DatasheetError> {
        let file = path.display().to_string();
        let reader = lab_io::files::open_input(path).map_err(|reason| DatasheetError::Read {
            file: file.clone(),
            reason,
        })?;
        Datasheet::from_reader(&file, reader)
    }

    /// Loads and validates a table from any reader (at most [`MAX_DATASHEET_BYTES`] are read).
    pub fn from_reader(name: &str, reader: impl Read) -> Result<Datasheet, DatasheetError> {
        let file = name.to_string();
        let mut bytes = Vec::new();
        reader
            .take(MAX_DATASHEET_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|reason| DatasheetError::Read {
                file: file.clone(),
                reason,
            })?;
        if bytes.len() as u64 > MAX_DATASHEET_BYTES {
            return Err(DatasheetError::TooLarge { file });
        }
        let content = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
        let rows = parse(&file, content)?;
        Ok(Datasheet { name: file, rows })
    }

    /// The name it was loaded under (a path, or [`EMBEDDED_NAME`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every row, in file order.
    pub fn rows(&self) -> &[DatasheetRow] {
        &self.rows
    }

    /// The row of the model CUDA names `name`.
    pub fn for_cuda_name(&self, name: &str) -> Option<&DatasheetRow> {
        self.rows.iter().find(|r| r.matches(name))
    }

    /// The rows of a catalogue slug (one per form factor).
    pub fn for_gpu(&self, gpu: &str) -> Vec<&DatasheetRow> {
        self.rows.iter().filter(|r| r.gpu == gpu).collect()
    }

    /// Catalogue slugs without a datasheet row, and datasheet slugs the catalogue does not
    /// offer: both empty when the two tables describe the same models.
    pub fn compare_with(&self, catalogue: &Catalogue) -> (Vec<String>, Vec<String>) {
        let ours: Vec<&str> = self.rows.iter().map(|r| r.gpu.as_str()).collect();
        let theirs = catalogue.gpus();
        let missing = theirs
            .iter()
            .filter(|g| !ours.contains(g))
            .map(|g| g.to_string())
            .collect();
        let mut extra: Vec<String> = ours
            .iter()
            .filter(|g| !theirs.contains(g))
            .map(|g| g.to_string())
            .collect();
        extra.dedup();
        (missing, extra)
    }
}

fn field_error(file: &str, row: u64, column: &str, problem: impl ToString) -> DatasheetError {
    DatasheetError::Field {
        file: file.to_string(),
        row,
        column: column.to_string(),
        problem: problem.to_string(),
    }
}

/// Lowercase letters, digits and `-`, not starting with `-`: the catalogue's slug rule.
fn is_slug(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('-')
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// What a figure column holds, in its problems' words.
const FIGURE: &str = "a positive figure such as 4800 or 66.9";

/// A positive figure (`4800`, `66.9`, `1.5e3`), read as the catalogue and the offers file read
/// theirs ([`crate::field::decimal`]); empty is a problem here, an optional column checks that
/// first.
fn figure(text: &str) -> Result<f64, FieldProblem> {
    use rust_decimal::prelude::ToPrimitive;
    match crate::field::decimal(text, FIGURE, true)? {
        // A decimal of at most 28 digits is always a finite f64.
        Some(d) => d.to_f64().ok_or(FieldProblem::TooLarge {
            value: text.to_string(),
            expected: FIGURE,
        }),
        None => Err(FieldProblem::Empty { expected: FIGURE }),
    }
}

/// A CSV fault, at the row an editor shows (CRLF files included: see [`line_of`]).
fn syntax_error(file: &str, content: &[u8], e: &csv::Error) -> DatasheetError {
    DatasheetError::Syntax {
        file: file.to_string(),
        row: line_of(content, e.position()),
        message: match e.kind() {
            csv::ErrorKind::Utf8 { .. } => {
                "is not valid UTF-8 text; expected a UTF-8 CSV file".to_string()
            }
            _ => e.to_string(),
        },
    }
}

fn parse(file: &str, content: &[u8]) -> Result<Vec<DatasheetRow>, DatasheetError> {
    let mut reader = crate::rows::reader(content);
    let mut records = reader.records();
    let header = match records.next() {
        Some(Ok(h)) => h,
        Some(Err(e)) => return Err(syntax_error(file, content, &e)),
        None => {
            return Err(DatasheetError::Syntax {
                file: file.to_string(),
                row: 1,
                message: format!(
                    "the file is empty; expected the header `{}` and one row per GPU model",
                    COLUMNS.join(",")
                ),
            });
        }
    };
    let mut index: HashMap<String, usize> = HashMap::new();
    for (i, name) in header.iter().enumerate() {
        if !COLUMNS.contains(&name) {
            return Err(DatasheetError::Header {
                file: file.to_string(),
                column: name.to_string(),
                problem: "is not a datasheet column",
            });
        }
        if index.insert(name.to_string(), i).is_some() {
            return Err(DatasheetError::Header {
                file: file.to_string(),
                column: name.to_string(),
                problem: "appears twice",
            });
        }
    }
    if let Some(missing) = COLUMNS.iter().find(|c| !index.contains_key(**c)) {
        return Err(DatasheetError::Header {
            file: file.to_string(),
            column: missing.to_string(),
            problem: "is missing",
        });
    }
    let mut rows = Vec::new();
    let mut keys: HashMap<(String, String), u64> = HashMap::new();
    let mut names: HashMap<String, u64> = HashMap::new();
    let width = header.len();
    let mut lines = LineCounter::default();
    for record in records {
        let record = record.map_err(|e| syntax_error(file, content, &e))?;
        let row = lines.line_of(content, record.position());
        if record.iter().all(str::is_empty) {
            continue;
        }
        // As the catalogue names them: the first extra field, or the first missing column.
        let (found, expected) = (record.len(), width);
        if found > width {
            let problem = FieldProblem::Extra { found, expected };
            return Err(field_error(file, row, &format!("#{}", width + 1), problem));
        }
        if found < width {
            let problem = FieldProblem::Missing { found, expected };
            return Err(field_error(file, row, &header[found], problem));
        }
        let get = |column: &str| record.get(index[column]).unwrap_or("");
        let bad = |column: &str, problem: String| field_error(file, row, column, problem);
        let problem = |column: &str, problem: FieldProblem| field_error(file, row, column, problem);
        let gpu = get("gpu");
        if !is_slug(gpu) {
            let value = gpu.to_string();
            return Err(problem("gpu", FieldProblem::Slug { value }));
        }
        let variant = get("variant");
        if !is_slug(variant) {
            return Err(bad(
                "variant",
                format!(
                    "`{variant}` is not a variant; expected lowercase letters, digits and `-`, such as sxm or pcie"
                ),
            ));
        }
        if let Some(first) = keys.insert((gpu.to_string(), variant.to_string()), row) {
            return Err(bad(
                "variant",
                format!(
                    "`{gpu}` `{variant}` duplicates row {first}; expected one row per GPU and variant"
                ),
            ));
        }
        let model = get("model");
        crate::field::text(model, "the model's display name").map_err(|p| problem("model", p))?;
        let listed = get("cuda_names");
        if !listed.is_empty() {
            crate::field::text(listed, "CUDA names separated by `|`")
                .map_err(|p| problem("cuda_names", p))?;
        }
        let cuda_names: Vec<String> = if get("cuda_names").is_empty() {
            Vec::new()
        } else {
            get("cuda_names")
                .split('|')
                .map(|n| n.trim().to_string())
                .collect()
        };
        for n in &cuda_names {
            if n.is_empty() {
                return Err(bad(
                    "cuda_names",
                    "has an empty name; expected names separated by `|`, such as NVIDIA H200"
                        .into(),
                ));
            }
            if let Some(first) = names.insert(n.to_ascii_lowercase(), row) {
                return Err(bad(
                    "cuda_names",
                    format!(
                        "`{n}` is already the name of row {first}; expected each CUDA name on one row only"
                    ),
                ));
            }
        }
        let number = |column: &str| figure(get(column)).map_err(|p| problem(column, p));
        let optional = |column: &str| -> Result<Option<f64>, DatasheetError> {
            if get(column).is_empty() {
                Ok(None)
            } else {
                number(column).map(Some)
            }
        };
        let pcie_generation = crate::field::one_of(
            get("pcie_generation"),
            "a PCIe generation",
            &[1, 2, 3, 4, 5, 6],
            "1 to 6",
        )
        .map_err(|p| problem("pcie_generation", p))?;
        let pcie_lanes = crate::field::one_of(
            get("pcie_lanes"),
            "a PCIe lane count",
            &[1, 2, 4, 8, 16],
            "1, 2, 4, 8 or 16",
        )
        .map_err(|p| problem("pcie_lanes", p))?;
        let nvlink_gb_s = optional("nvlink_gb_s")?;
        let nvlink_links = if get("nvlink_links").is_empty() {
            None
        } else {
            let links: Vec<u32> = (1..=18).collect();
            Some(
                crate::field::one_of(get("nvlink_links"), "a link count", &links, "1 to 18")
                    .map_err(|p| problem("nvlink_links", p))?,
            )
        };
        if nvlink_links.is_some() && nvlink_gb_s.is_none() {
            return Err(bad(
                "nvlink_links",
                "is set without nvlink_gb_s; expected the links' bandwidth too".into(),
            ));
        }
        let source = get("source");
        crate::field::text(source, "the public source of the row's figures")
            .map_err(|p| problem("source", p))?;
        rows.push(DatasheetRow {
            gpu: gpu.to_string(),
            variant: variant.to_string(),
            model: model.to_string(),
            cuda_names,
            memory_bandwidth_gb_s: number("memory_bandwidth_gb_s")?,
            fp32_tflops: number("fp32_tflops")?,
            tf32_tflops: number("tf32_tflops")?,
            fp16_tflops: number("fp16_tflops")?,
            bf16_tflops: number("bf16_tflops")?,
            fp8_tflops: optional("fp8_tflops")?,
            pcie_generation,
            pcie_lanes,
            nvlink_gb_s,
            nvlink_links,
            source: source.to_string(),
            row,
        });
    }
    if rows.is_empty() {
        return Err(DatasheetError::NoRows {
            file: file.to_string(),
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HEADER: &str = "gpu,variant,model,cuda_names,memory_bandwidth_gb_s,fp32_tflops,tf32_tflops,fp16_tflops,bf16_tflops,fp8_tflops,pcie_generation,pcie_lanes,nvlink_gb_s,nvlink_links,source";
    const ROW: &str = "h200,sxm,NVIDIA H200 SXM,NVIDIA H200,4800,66.9,494.7,989.4,989.4,1978.9,5,16,900,18,datasheet";

    fn load(text: &str) -> Result<Datasheet, DatasheetError> {
        Datasheet::from_reader("t.csv", text.as_bytes())
    }

    fn with(column: &str, value: &str) -> String {
        let i = COLUMNS.iter().position(|c| *c == column).unwrap();
        let mut fields: Vec<String> = ROW.split(',').map(str::to_string).collect();
        fields[i] = value.to_string();
        format!("{HEADER}\n{}\n", fields.join(","))
    }

    #[test]
    fn the_bundled_table_is_valid_and_covers_the_catalogue() {
        let d = Datasheet::embedded();
        let (missing, extra) = d.compare_with(&Catalogue::embedded());
        assert!(
            missing.is_empty(),
            "catalogue GPUs without a datasheet row: {missing:?}"
        );
        assert!(
            extra.is_empty(),
            "datasheet GPUs the catalogue does not offer: {extra:?}"
        );
        for r in d.rows() {
            assert!(r.source.contains('.'), "row {} names no source", r.row);
            // Tensor units beat the plain float32 units wherever there are any.
            assert!(r.bf16_tflops >= r.fp32_tflops, "row {}", r.row);
        }
        let h200 = d.for_cuda_name("nvidia h200").unwrap();
        assert_eq!(h200.gpu, "h200");
        assert_eq!(h200.memory_bandwidth_gb_s, 4800.0);
        // The reference: dense bf16 about 989 TFLOP/s on an H200.
        assert!((h200.tflops(GemmKind::Bfloat16).unwrap() - 989.0).abs() < 1.0);
        assert!(d.for_cuda_name("NVIDIA H200 NVL").is_none());
        assert_eq!(d.for_gpu("a100-80gb").len(), 2);
        assert!(
            d.for_cuda_name("NVIDIA A100-SXM4-40GB")
                .unwrap()
                .fp8_tflops
                .is_none()
        );
    }

    #[test]
    fn pcie_links_per_direction() {
        assert!((pcie_gb_s(5, 16).unwrap() - 63.015).abs() < 0.01);
        assert!((pcie_gb_s(4, 16).unwrap() - 31.508).abs() < 0.01);
        assert!((pcie_gb_s(3, 8).unwrap() - 7.877).abs() < 0.01);
        assert_eq!(pcie_gb_s(1, 1), Some(0.25));
        assert_eq!(pcie_gb_s(7, 16), None);
        assert_eq!(pcie_gb_s(4, 0), None);
    }

    #[test]
    fn each_fault_names_the_row_and_column() {
        let e = load(&with("fp32_tflops", "67 TF")).unwrap_err().to_string();
        assert_eq!(
            e,
            "the datasheet table t.csv, row 2, column `fp32_tflops`: `67 TF` is not a number; expected a positive figure such as 4800 or 66.9"
        );
        let e = load(&with("memory_bandwidth_gb_s", "0"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("column `memory_bandwidth_gb_s`: `0` is zero; expected a positive figure"),
            "{e}"
        );
        let e = load(&with("pcie_generation", "7")).unwrap_err().to_string();
        assert!(
            e.ends_with("`7` is not a PCIe generation; expected 1 to 6"),
            "{e}"
        );
        let e = load(&with("pcie_generation", "4.0"))
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with("`4.0` is not a whole number; expected 1 to 6"),
            "{e}"
        );
        let e = load(&with("nvlink_links", "-2")).unwrap_err().to_string();
        assert!(e.ends_with("`-2` is negative; expected 1 to 18"), "{e}");
        let e = load(&with("fp8_tflops", "1e99999"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`1e99999` is not a number"), "{e}");
        let e = load(&with("bf16_tflops", "")).unwrap_err().to_string();
        assert!(e.contains("column `bf16_tflops`: is empty"), "{e}");
        // A figure in the exponent form pandas writes is the same figure.
        let d = load(&with("fp32_tflops", "6.69e1")).unwrap();
        assert_eq!(d.rows()[0].fp32_tflops, 66.9);
        let e = load(&with("model", "H200\u{2028}rm -rf"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("column `model`: `H200\\u{2028}rm -rf` holds a line break"),
            "{e}"
        );
        let e = load(&with("pcie_lanes", "12")).unwrap_err().to_string();
        assert!(e.contains("expected 1, 2, 4, 8 or 16"), "{e}");
        let e = load(&with("source", "")).unwrap_err().to_string();
        assert!(e.contains("column `source`: is empty"), "{e}");
        let e = load(&with("gpu", "H200")).unwrap_err().to_string();
        assert!(e.contains("`H200` is not a GPU slug"), "{e}");
        let e = load(&with("nvlink_gb_s", "")).unwrap_err().to_string();
        assert!(
            e.contains("nvlink_links`: is set without nvlink_gb_s"),
            "{e}"
        );
        let e = load(&with("cuda_names", "NVIDIA H200||x"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("has an empty name"), "{e}");
    }

    #[test]
    fn duplicates_and_header_faults_are_refused() {
        let twice = format!("{HEADER}\n{ROW}\n{ROW}\n");
        let e = load(&twice).unwrap_err().to_string();
        assert!(
            e.contains("row 3, column `variant`: `h200` `sxm` duplicates row 2"),
            "{e}"
        );
        let other = ROW.replace(",sxm,", ",nvl,");
        let e = load(&format!("{HEADER}\n{ROW}\n{other}\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`NVIDIA H200` is already the name of row 2"),
            "{e}"
        );
        let e = load(&HEADER.replace("fp8_tflops", "fp4_tflops"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("column `fp4_tflops`: is not a datasheet column"),
            "{e}"
        );
        let e = load(&HEADER.replace(",source", ""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("column `source`: is missing"), "{e}");
        let e = load(&format!("{HEADER}\n")).unwrap_err().to_string();
        assert!(e.contains("has no rows"), "{e}");
        let e = load(&format!("{HEADER}\n{ROW},extra\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with("row 2, column `#16`: is extra (the row has 16 fields, the header 15)"),
            "{e}"
        );
        let short = ROW.rsplit_once(',').unwrap().0;
        let e = load(&format!("{HEADER}\n{short}\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with(
                "row 2, column `source`: is missing (the row has 14 fields, the header 15)"
            ),
            "{e}"
        );
        // Row numbers are the editor's, CRLF line ends included.
        let crlf = format!("{HEADER}\r\n{ROW}\r\n{ROW}\r\n");
        let e = load(&crlf).unwrap_err().to_string();
        assert!(e.contains("row 3, column `variant`"), "{e}");
        let big = "x".repeat(MAX_DATASHEET_BYTES as usize + 1);
        assert!(matches!(load(&big), Err(DatasheetError::TooLarge { .. })));
    }

    #[test]
    fn an_empty_fp8_means_none_and_a_bom_is_accepted() {
        let d = Datasheet::from_reader(
            "t.csv",
            format!("\u{feff}{}", with("fp8_tflops", "")).as_bytes(),
        )
        .unwrap();
        assert_eq!(d.rows()[0].tflops(GemmKind::Float8E4m3), None);
        assert_eq!(d.rows()[0].nvlink_gb_s_per_direction(), Some(450.0));
    }

    proptest! {
        #[test]
        fn any_text_in_a_numeric_field_is_an_error_or_a_positive_number(text in "[0-9a-z.,+ -]{0,8}") {
            match figure(&text) {
                Ok(v) => prop_assert!(v > 0.0 && v.is_finite()),
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }

        #[test]
        fn loading_any_row_never_panics(row in "[ -~]{0,120}") {
            let _ = load(&format!("{HEADER}\n{row}\n"));
        }
    }
}

//! The tariff catalogue: one row per GPU model and package duration, validated on load.
//!
//! The format is `data/tarifs-forfaits.csv` (embedded in the binary as the default):
//! a header naming the nine [`COLUMNS`] (in any order), then rows with whole positive USD cents,
//! durations of 3, 7 or 30 days only, and every model present with all three durations. A UTF-8
//! byte order mark and CRLF line endings are accepted (spreadsheets write both); surrounding
//! spaces in a field are ignored. Any fault stops the load with the file, the row and the column:
//! rows are counted as lines of the file, the header being row 1, so a user can jump straight to
//! it in an editor.
//!
//! Two memory columns describe one GPU. `vendor_memory_gb` is the figure the vendor publishes
//! ("80 GB", "141 GB"): it names the product. `usable_memory_mib` is what `fit` compares against:
//! the total device memory a CUDA or ROCm process sees (`cuDeviceTotalMem`,
//! `hipDeviceProp_t::totalGlobalMem`) in MiB, rounded down, as `torch.cuda.get_device_properties()`
//! and `deviceQuery` print it and as `iteragpu environment` prints it on the machine itself
//! (`total memory mib`). It is less than `nvidia-smi`'s `memory.total`, which also counts what the
//! driver reserves for itself. Each row's `source` says where its figure was observed, or how it
//! was derived.
//!
//! A catalogue file is bounded ([`MAX_CATALOGUE_BYTES`]) and validated in linear time: every
//! check is a hash lookup or a single pass, so a large file costs what it takes to read.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io::Read;
use std::path::Path;

use serde::Serialize;

pub use crate::field::FieldProblem;
use crate::price::PriceError;
use crate::rows::{LineCounter, line_of};

/// The columns, in the order the bundled file and `price --list --json` use.
pub const COLUMNS: [&str; 10] = [
    "gpu",
    "model",
    "gpus_per_lot",
    "vendor_memory_gb",
    "usable_memory_mib",
    "days",
    "price_cents",
    "currency",
    "snapshot_date",
    "source",
];

/// The largest catalogue file read, in bytes (32 MiB: the bundled 45 rows take 11 KB, and 100,000
/// rows with long sources about 25 MB). A larger file is refused by its size; a reader with no
/// end (devices and FIFOs are refused as paths before that) after reading at most this much.
pub const MAX_CATALOGUE_BYTES: u64 = 32 * 1024 * 1024;

/// The column that `vendor_memory_gb` replaced, recognised so that an old file gets advice.
const RENAMED_MEMORY_COLUMN: &str = "gpu_memory_gib";

/// The package durations on offer, in days. A catalogue has one row per model for each.
pub const DURATIONS: [u32; 3] = [3, 7, 30];

/// How the bundled catalogue is named in messages and in `price --json`.
pub const EMBEDDED_NAME: &str = "embedded";

/// The bundled catalogue, `data/tarifs-forfaits.csv`.
pub const EMBEDDED_CSV: &str = include_str!("../../../data/tarifs-forfaits.csv");

/// One package: a lot of `gpus_per_lot` GPUs of one model for `days` days, at `price_cents`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tariff {
    /// The slug used on the command line (`b200`).
    pub gpu: String,
    /// The display name (`NVIDIA B200`).
    pub model: String,
    /// GPUs in one lot; the lot price already covers all of them.
    pub gpus_per_lot: u32,
    /// The vendor's published memory per GPU, in the vendor's "GB" (see the module documentation).
    pub vendor_memory_gb: u32,
    /// The total memory a CUDA/ROCm process sees on one GPU, in MiB (2^20 bytes), rounded down.
    pub usable_memory_mib: u64,
    /// Package duration: 3, 7 or 30.
    pub days: u32,
    /// Price of one lot for the whole duration, in whole cents of `currency`.
    pub price_cents: u64,
    /// ISO 4217 code, e.g. `USD`.
    pub currency: String,
    /// The day the price was read (YYYY-MM-DD).
    pub snapshot_date: String,
    /// Where the price comes from; the bundled rows say they are examples.
    pub source: String,
    /// The row of the file this came from (header = row 1).
    #[serde(skip)]
    pub row: u64,
}

impl Tariff {
    /// Whether this row's price is an example rather than a quote: its `source` says "example".
    /// Every price printed from such a row must say so.
    pub fn is_example(&self) -> bool {
        self.source.to_ascii_lowercase().contains("example")
    }
}

/// A validated catalogue and the name it was loaded under (a path, or [`EMBEDDED_NAME`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catalogue {
    name: String,
    rows: Vec<Tariff>,
}

/// What is wrong with a header column.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderProblem {
    /// A required column is absent.
    #[error("is missing; expected the columns {}", COLUMNS.join(","))]
    Missing,
    /// A column that is not one of ours (often a typo).
    #[error("is not a catalogue column; expected exactly the columns {}", COLUMNS.join(","))]
    Unknown,
    /// The same column twice.
    #[error("appears more than once; expected each of the columns {} once", COLUMNS.join(","))]
    Duplicate,
    /// The old name of `vendor_memory_gb`.
    #[error(
        "was renamed: it held the vendor's \"GB\" figure, so it is now `vendor_memory_gb`, and \
         `usable_memory_mib` (the total MiB a CUDA/ROCm process sees) is required beside it; \
         expected the columns {}", COLUMNS.join(",")
    )]
    Renamed,
}

/// A catalogue that cannot be used. Every variant names the file; row and column where there is one.
#[derive(Debug, thiserror::Error)]
pub enum CatalogueError {
    /// The file could not be read.
    #[error("cannot read the catalogue {file}: {reason}")]
    Read {
        /// Path or name.
        file: String,
        /// The OS error (in the message itself, so one line says everything).
        reason: std::io::Error,
    },
    /// More than [`MAX_CATALOGUE_BYTES`].
    #[error(
        "the catalogue {file} is larger than {} bytes (32 MiB), the largest accepted; expected a \
         CSV file of tariff rows (the bundled one has 45 rows in 11 KB)",
        MAX_CATALOGUE_BYTES
    )]
    TooLarge {
        /// Path or name.
        file: String,
    },
    /// Nothing (or only blanks and a byte order mark) in the file.
    #[error("the catalogue {file} is empty; expected the header line `{}` followed by one row per GPU model and duration", COLUMNS.join(","))]
    Empty {
        /// Path or name.
        file: String,
    },
    /// A header and nothing else.
    #[error(
        "the catalogue {file} has a header but no rows; expected one row per GPU model and duration (3, 7 and 30 days)"
    )]
    NoRows {
        /// Path or name.
        file: String,
    },
    /// Not readable as CSV text (invalid UTF-8, for instance).
    #[error("the catalogue {file}, row {row}: {message}")]
    Syntax {
        /// Path or name.
        file: String,
        /// Row (line) where the reader stopped.
        row: u64,
        /// What the CSV reader said.
        message: String,
    },
    /// A fault in the header.
    #[error("the catalogue {file}, row 1 (header), column `{column}`: {problem}")]
    Header {
        /// Path or name.
        file: String,
        /// The column.
        column: String,
        /// What is wrong.
        problem: HeaderProblem,
    },
    /// A fault in one field.
    #[error("the catalogue {file}, row {row}, column `{column}`: {problem}")]
    Field {
        /// Path or name.
        file: String,
        /// Row (line of the file, header = 1).
        row: u64,
        /// Column name (or `#N`, counting from 1, past the header).
        column: String,
        /// What is wrong (boxed to keep the error small).
        problem: Box<FieldProblem>,
    },
    /// A model without one of the durations.
    #[error("the catalogue {file}, rows {}, column `days`: GPU `{gpu}` has no {missing}-day row; expected rows for 3, 7 and 30 days for every GPU", join_rows(.rows))]
    Incomplete {
        /// Path or name.
        file: String,
        /// GPU slug.
        gpu: String,
        /// The rows the model has.
        rows: Vec<u64>,
        /// The first duration it lacks.
        missing: u32,
    },
}

fn join_rows(rows: &[u64]) -> String {
    rows.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl Catalogue {
    /// The bundled catalogue. It is validated by this crate's tests, so loading it cannot fail.
    pub fn embedded() -> Catalogue {
        match Catalogue::from_reader(EMBEDDED_NAME, EMBEDDED_CSV.as_bytes()) {
            Ok(catalogue) => catalogue,
            // Unreachable in a tested build: `embedded_catalogue_is_complete` loads this file.
            Err(err) => panic!("the embedded catalogue is invalid: {err}"),
        }
    }

    /// `--catalogue FILE` when given, else the bundled catalogue: the one lookup every command
    /// that prices or expects a package makes.
    pub fn load(path: Option<&Path>) -> Result<Catalogue, CatalogueError> {
        match path {
            Some(path) => Catalogue::from_path(path),
            None => Ok(Catalogue::embedded()),
        }
    }

    /// Loads and validates a catalogue file; messages name it by the path as given.
    pub fn from_path(path: &Path) -> Result<Catalogue, CatalogueError> {
        let file = path.display().to_string();
        let reader = lab_io::files::open_input(path).map_err(|reason| CatalogueError::Read {
            file: file.clone(),
            reason,
        })?;
        // A regular file (the only kind `open_input` lets through) says its size: refuse a large
        // one without reading it.
        if let Ok(meta) = reader.metadata()
            && meta.is_file()
            && meta.len() > MAX_CATALOGUE_BYTES
        {
            return Err(CatalogueError::TooLarge { file });
        }
        Catalogue::from_reader(&file, reader)
    }

    /// Loads and validates a catalogue from any reader; `name` is used in messages and as
    /// [`Catalogue::name`].
    pub fn from_reader(name: &str, mut reader: impl Read) -> Result<Catalogue, CatalogueError> {
        let file = name.to_string();
        let mut bytes = Vec::new();
        reader
            .by_ref()
            .take(MAX_CATALOGUE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|reason| CatalogueError::Read {
                file: file.clone(),
                reason,
            })?;
        if bytes.len() as u64 > MAX_CATALOGUE_BYTES {
            return Err(CatalogueError::TooLarge { file });
        }
        let content = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
        if content.iter().all(u8::is_ascii_whitespace) {
            return Err(CatalogueError::Empty { file });
        }
        let rows = Parser::new(file.clone()).parse(content)?;
        Ok(Catalogue { name: file, rows })
    }

    /// The name given at load: a path, or [`EMBEDDED_NAME`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether this is the bundled catalogue.
    pub fn is_embedded(&self) -> bool {
        self.name == EMBEDDED_NAME
    }

    /// Every row, in file order.
    pub fn rows(&self) -> &[Tariff] {
        &self.rows
    }

    /// The GPU slugs, each once, in file order.
    pub fn gpus(&self) -> Vec<&str> {
        first_seen(self.rows.iter().map(|t| t.gpu.as_str()))
    }

    /// The package for a GPU slug (case-insensitive) and duration. An unknown GPU is refused with
    /// the valid slugs and the nearest one; a duration other than 3, 7 or 30 is refused.
    pub fn find(&self, gpu: &str, days: u32) -> Result<&Tariff, PriceError> {
        if !DURATIONS.contains(&days) {
            return Err(PriceError::Days(days.to_string()));
        }
        let wanted = gpu.trim().to_ascii_lowercase();
        if let Some(row) = self.rows.iter().find(|t| t.gpu == wanted && t.days == days) {
            return Ok(row);
        }
        let valid = self.gpus();
        Err(PriceError::UnknownGpu {
            gpu: gpu.to_string(),
            nearest: nearest(&wanted, &valid).map(str::to_string),
            valid: valid.iter().map(|s| s.to_string()).collect(),
        })
    }
}

/// Each distinct item once, in the order first seen; a hash set keeps it linear.
fn first_seen<'a>(items: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen = HashSet::new();
    items.filter(|item| seen.insert(*item)).collect()
}

/// The slug nearest to `wanted`: one that starts with it (`h100` -> `h100-sxm`) if any, else the
/// smallest edit distance; ties go to the first in catalogue order.
pub fn nearest<'a>(wanted: &str, candidates: &[&'a str]) -> Option<&'a str> {
    if !wanted.is_empty()
        && let Some(prefixed) = candidates.iter().find(|c| c.starts_with(wanted))
    {
        return Some(prefixed);
    }
    candidates
        .iter()
        .min_by_key(|c| strsim::levenshtein(wanted, c))
        .copied()
}

/// Reads rows and checks each fault in the order a reader would meet it.
struct Parser {
    file: String,
}

/// What a numeric column holds, for messages.
const GPUS_EXPECTED: &str = "a positive whole number of GPUs per lot";
const VENDOR_MEMORY_EXPECTED: &str =
    "a positive whole number: the vendor's published memory per GPU in GB";
const USABLE_MEMORY_EXPECTED: &str =
    "a positive whole number: the MiB a CUDA/ROCm process sees as the GPU's total memory";
const PRICE_EXPECTED: &str = "a positive whole number of cents";

impl Parser {
    fn new(file: String) -> Parser {
        Parser { file }
    }

    fn field_error(&self, row: u64, column: &str, problem: FieldProblem) -> CatalogueError {
        CatalogueError::Field {
            file: self.file.clone(),
            row,
            column: column.to_string(),
            problem: Box::new(problem),
        }
    }

    fn syntax_error(&self, content: &[u8], err: &csv::Error) -> CatalogueError {
        let row = line_of(content, err.position());
        let message = match err.kind() {
            csv::ErrorKind::Utf8 { .. } => {
                "is not valid UTF-8 text; expected a UTF-8 CSV file".to_string()
            }
            _ => err.to_string(),
        };
        CatalogueError::Syntax {
            file: self.file.clone(),
            row,
            message,
        }
    }

    fn parse(&self, content: &[u8]) -> Result<Vec<Tariff>, CatalogueError> {
        let mut reader = crate::rows::reader(content);
        let mut records = reader.records();
        let header = match records.next() {
            Some(Ok(h)) => h,
            Some(Err(err)) => return Err(self.syntax_error(content, &err)),
            None => {
                return Err(CatalogueError::Empty {
                    file: self.file.clone(),
                });
            }
        };
        let index = self.header_index(&header)?;
        let width = header.len();

        let mut rows: Vec<Tariff> = Vec::new();
        let mut lines = LineCounter::default();
        let mut seen: HashMap<(String, u32), u64> = HashMap::new();
        let mut first_of_gpu: HashMap<String, usize> = HashMap::new();
        for record in records {
            let record = record.map_err(|err| self.syntax_error(content, &err))?;
            let row = lines.line_of(content, record.position());
            if record.len() > width {
                return Err(self.field_error(
                    row,
                    &format!("#{}", width + 1),
                    FieldProblem::Extra {
                        found: record.len(),
                        expected: width,
                    },
                ));
            }
            let get = |column: &'static str| -> Result<&str, CatalogueError> {
                let at = index[column];
                record.get(at).ok_or_else(|| {
                    self.field_error(
                        row,
                        column,
                        FieldProblem::Missing {
                            found: record.len(),
                            expected: width,
                        },
                    )
                })
            };
            let tariff = Tariff {
                gpu: self.slug(row, get("gpu")?)?,
                model: self.text(row, "model", get("model")?, "the model's display name")?,
                gpus_per_lot: self.positive_u32(
                    row,
                    "gpus_per_lot",
                    get("gpus_per_lot")?,
                    GPUS_EXPECTED,
                )?,
                vendor_memory_gb: self.positive_u32(
                    row,
                    "vendor_memory_gb",
                    get("vendor_memory_gb")?,
                    VENDOR_MEMORY_EXPECTED,
                )?,
                usable_memory_mib: self.positive(
                    row,
                    "usable_memory_mib",
                    get("usable_memory_mib")?,
                    USABLE_MEMORY_EXPECTED,
                )?,
                days: self.days(row, get("days")?)?,
                price_cents: self.positive(
                    row,
                    "price_cents",
                    get("price_cents")?,
                    PRICE_EXPECTED,
                )?,
                currency: self.currency(row, get("currency")?)?,
                snapshot_date: self.date(row, get("snapshot_date")?)?,
                source: self.text(row, "source", get("source")?, "where the price comes from")?,
                row,
            };
            let key = (tariff.gpu.clone(), tariff.days);
            if let Some(first_row) = seen.get(&key) {
                return Err(self.field_error(
                    row,
                    "days",
                    FieldProblem::Duplicate {
                        gpu: tariff.gpu,
                        days: tariff.days,
                        first_row: *first_row,
                    },
                ));
            }
            seen.insert(key, row);
            match first_of_gpu.get(&tariff.gpu) {
                Some(&at) => self.consistent(&rows[at], &tariff)?,
                None => {
                    first_of_gpu.insert(tariff.gpu.clone(), rows.len());
                }
            }
            rows.push(tariff);
        }
        if rows.is_empty() {
            return Err(CatalogueError::NoRows {
                file: self.file.clone(),
            });
        }
        self.complete(&rows)?;
        Ok(rows)
    }

    fn header_index(
        &self,
        header: &csv::StringRecord,
    ) -> Result<HashMap<&'static str, usize>, CatalogueError> {
        let fault = |column: &str, problem| CatalogueError::Header {
            file: self.file.clone(),
            column: column.to_string(),
            problem,
        };
        let mut index = HashMap::new();
        for (at, name) in header.iter().enumerate() {
            let Some(known) = COLUMNS.iter().find(|c| **c == name) else {
                if name == RENAMED_MEMORY_COLUMN {
                    return Err(fault(name, HeaderProblem::Renamed));
                }
                return Err(fault(name, HeaderProblem::Unknown));
            };
            if index.insert(*known, at).is_some() {
                return Err(fault(name, HeaderProblem::Duplicate));
            }
        }
        if let Some(missing) = COLUMNS.iter().find(|c| !index.contains_key(*c)) {
            return Err(fault(missing, HeaderProblem::Missing));
        }
        Ok(index)
    }

    fn text(
        &self,
        row: u64,
        column: &str,
        value: &str,
        expected: &'static str,
    ) -> Result<String, CatalogueError> {
        crate::field::text(value, expected).map_err(|p| self.field_error(row, column, p))?;
        Ok(value.to_string())
    }

    fn slug(&self, row: u64, value: &str) -> Result<String, CatalogueError> {
        let value = self.text(row, "gpu", value, "a GPU slug such as h100-sxm")?;
        let ok = value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !value.starts_with('-');
        if !ok {
            return Err(self.field_error(row, "gpu", FieldProblem::Slug { value }));
        }
        Ok(value)
    }

    fn positive(
        &self,
        row: u64,
        column: &str,
        value: &str,
        expected: &'static str,
    ) -> Result<u64, CatalogueError> {
        crate::field::positive(value, expected).map_err(|p| self.field_error(row, column, p))
    }

    fn positive_u32(
        &self,
        row: u64,
        column: &str,
        value: &str,
        expected: &'static str,
    ) -> Result<u32, CatalogueError> {
        let wide = self.positive(row, column, value, expected)?;
        u32::try_from(wide).map_err(|_| {
            self.field_error(
                row,
                column,
                FieldProblem::TooLarge {
                    value: value.to_string(),
                    expected,
                },
            )
        })
    }

    fn days(&self, row: u64, value: &str) -> Result<u32, CatalogueError> {
        let days = self.positive_u32(row, "days", value, "3, 7 or 30")?;
        if !DURATIONS.contains(&days) {
            return Err(self.field_error(
                row,
                "days",
                FieldProblem::Duration {
                    value: value.to_string(),
                },
            ));
        }
        Ok(days)
    }

    fn currency(&self, row: u64, value: &str) -> Result<String, CatalogueError> {
        let value = self.text(row, "currency", value, "a currency code such as USD")?;
        if value.len() != 3 || !value.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(self.field_error(row, "currency", FieldProblem::Currency { value }));
        }
        Ok(value)
    }

    fn date(&self, row: u64, value: &str) -> Result<String, CatalogueError> {
        let value = self.text(row, "snapshot_date", value, "a date written YYYY-MM-DD")?;
        if !is_calendar_date(&value) {
            return Err(self.field_error(row, "snapshot_date", FieldProblem::Date { value }));
        }
        Ok(value)
    }

    /// The per-model columns must agree with the model's first row.
    fn consistent(&self, first: &Tariff, this: &Tariff) -> Result<(), CatalogueError> {
        let pairs: [(&str, String, String); 5] = [
            ("model", first.model.clone(), this.model.clone()),
            (
                "gpus_per_lot",
                first.gpus_per_lot.to_string(),
                this.gpus_per_lot.to_string(),
            ),
            (
                "vendor_memory_gb",
                first.vendor_memory_gb.to_string(),
                this.vendor_memory_gb.to_string(),
            ),
            (
                "usable_memory_mib",
                first.usable_memory_mib.to_string(),
                this.usable_memory_mib.to_string(),
            ),
            ("currency", first.currency.clone(), this.currency.clone()),
        ];
        for (column, first_value, value) in pairs {
            if first_value != value {
                return Err(self.field_error(
                    this.row,
                    column,
                    FieldProblem::Inconsistent {
                        value,
                        gpu: this.gpu.clone(),
                        first_value,
                        first_row: first.row,
                    },
                ));
            }
        }
        Ok(())
    }

    /// Every GPU must have every duration. One pass groups the rows by GPU (a hash map), so the
    /// check is linear in the number of rows.
    fn complete(&self, rows: &[Tariff]) -> Result<(), CatalogueError> {
        let mut by_gpu: HashMap<&str, Vec<&Tariff>> = HashMap::new();
        for row in rows {
            by_gpu.entry(row.gpu.as_str()).or_default().push(row);
        }
        for gpu in first_seen(rows.iter().map(|t| t.gpu.as_str())) {
            let of_gpu = &by_gpu[gpu];
            if let Some(missing) = DURATIONS
                .iter()
                .find(|d| !of_gpu.iter().any(|t| t.days == **d))
            {
                return Err(CatalogueError::Incomplete {
                    file: self.file.clone(),
                    gpu: gpu.to_string(),
                    rows: of_gpu.iter().map(|t| t.row).collect(),
                    missing: *missing,
                });
            }
        }
        Ok(())
    }
}

/// `YYYY-MM-DD` naming a real day of the Gregorian calendar.
fn is_calendar_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let number = |r: std::ops::Range<usize>| -> Option<u32> {
        let part = &s[r];
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())
            .flatten()
    };
    let (Some(year), Some(month), Some(day)) = (number(0..4), number(5..7), number(8..10)) else {
        return false;
    };
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days_in_month).contains(&day)
}

impl fmt::Display for Tariff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}), {} days", self.model, self.gpu, self.days)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Catalogue, CatalogueError> {
        Catalogue::from_reader("test.csv", text.as_bytes())
    }

    const HEADER: &str = "gpu,model,gpus_per_lot,vendor_memory_gb,usable_memory_mib,days,price_cents,currency,snapshot_date,source";

    /// A valid two-model catalogue; row 2 is b200 3 days.
    fn small() -> String {
        let mut s = format!("{HEADER}\n");
        for (gpu, model, lot, mem, base) in [
            ("b200", "NVIDIA B200", 2, "180,182631", 100_000u64),
            ("l4", "NVIDIA L4", 1, "24,22478", 5_000),
        ] {
            for (i, d) in DURATIONS.iter().enumerate() {
                s.push_str(&format!(
                    "{gpu},{model},{lot},{mem},{d},{},USD,2026-11-29,example price\n",
                    base * (i as u64 + 1)
                ));
            }
        }
        s
    }

    fn message(text: &str) -> String {
        load(text).unwrap_err().to_string()
    }

    #[test]
    fn embedded_catalogue_is_complete() {
        let c = Catalogue::embedded();
        assert_eq!(c.rows().len(), 45);
        assert_eq!(c.gpus().len(), 15);
        assert!(c.is_embedded());
        for gpu in c.gpus() {
            for d in DURATIONS {
                let t = c.find(gpu, d).unwrap();
                assert!(t.is_example(), "{t}");
                assert_eq!(t.currency, "USD");
                // Every usable figure says where it comes from, in its own row.
                let said = format!("usable memory: {} MiB ", t.usable_memory_mib);
                assert!(t.source.contains(&said), "{t}: {}", t.source);
                assert!(
                    t.source.contains("observed") || t.source.contains("DERIVED"),
                    "{t}"
                );
            }
        }
        assert_eq!(c.find("b200", 7).unwrap().gpus_per_lot, 2);
        // Every expected model of the issue is there.
        for gpu in [
            "b200",
            "h200",
            "h100-sxm",
            "h100-pcie",
            "a100-80gb",
            "l40s",
            "rtx-pro-6000",
            "rtx-5090",
            "rtx-4090",
            "mi300x",
        ] {
            assert!(c.gpus().contains(&gpu), "{gpu}");
        }
        // Longer packages never cost more per day than shorter ones in the bundled examples.
        for gpu in c.gpus() {
            let per_day = |d: u32| c.find(gpu, d).unwrap().price_cents as f64 / d as f64;
            assert!(
                per_day(3) >= per_day(7) && per_day(7) >= per_day(30),
                "{gpu}"
            );
        }
    }

    #[test]
    fn embedded_header_is_exactly_the_columns() {
        let first = EMBEDDED_CSV.lines().next().unwrap();
        assert_eq!(first, COLUMNS.join(","));
    }

    #[test]
    fn small_catalogue_loads() {
        let c = load(&small()).unwrap();
        assert_eq!(c.rows().len(), 6);
        assert_eq!(c.rows()[0].row, 2);
        assert_eq!(c.name(), "test.csv");
        assert!(!c.is_embedded());
        assert_eq!(c.find("B200", 30).unwrap().price_cents, 300_000);
    }

    #[test]
    fn bom_and_crlf_are_accepted() {
        let bom = format!("\u{feff}{}", small());
        assert_eq!(load(&bom).unwrap(), load(&small()).unwrap());
        let crlf = small().replace('\n', "\r\n");
        assert_eq!(load(&crlf).unwrap().rows(), load(&small()).unwrap().rows());
        let both = format!("\u{feff}{crlf}");
        assert_eq!(load(&both).unwrap().rows().len(), 6);
    }

    #[test]
    fn empty_files_are_refused() {
        for text in ["", "\n\n", "\u{feff}", "  \r\n"] {
            assert!(
                matches!(load(text), Err(CatalogueError::Empty { .. })),
                "{text:?}"
            );
            assert!(message(text).contains("test.csv is empty"));
        }
        assert!(matches!(
            load(&format!("{HEADER}\n")),
            Err(CatalogueError::NoRows { .. })
        ));
    }

    #[test]
    fn missing_duration_is_refused() {
        let text: String = small()
            .lines()
            .filter(|l| !l.starts_with("l4,NVIDIA L4,1,24,22478,30,"))
            .map(|l| format!("{l}\n"))
            .collect();
        let err = message(&text);
        assert_eq!(
            err,
            "the catalogue test.csv, rows 5, 6, column `days`: GPU `l4` has no 30-day row; expected rows for 3, 7 and 30 days for every GPU"
        );
    }

    #[test]
    fn a_line_break_or_control_character_in_a_text_field_is_refused() {
        // A quoted CSV field may hold a line break: the model name then carries a second line
        // into every script or YAML comment it is written into (issue 32).
        for (model, shown) in [
            (
                "\"NVIDIA B200\nenvs: {LD_PRELOAD: /tmp/x.so}\"",
                "NVIDIA B200\\u{a}envs",
            ),
            ("\"NVIDIA B200\rx\"", "NVIDIA B200\\u{d}x"),
            ("NVIDIA\u{0}B200", "NVIDIA\\u{0}B200"),
            ("NVIDIA\tB200", "NVIDIA\\u{9}B200"),
            ("NVIDIA\u{1b}[2JB200", "NVIDIA\\u{1b}[2JB200"),
            ("NVIDIA\u{2028}B200", "NVIDIA\\u{2028}B200"),
            ("NVIDIA\u{202e}B200", "NVIDIA\\u{202e}B200"),
        ] {
            let text = small().replacen("NVIDIA B200", model, 1);
            let err = message(&text);
            assert!(
                err.starts_with(&format!(
                    "the catalogue test.csv, row 2, column `model`: `{shown}"
                )),
                "{err}"
            );
            assert!(
                err.contains("holds a line break or another control character"),
                "{err}"
            );
            assert!(!err.contains('\n') && !err.contains('\r'), "{err}");
        }
        let text = small().replacen("example price", "\"example\nprice\"", 1);
        assert!(message(&text).contains("column `source`: `example\\u{a}price`"));
        // Quotes, `$`, backticks and other printable text stay accepted: the scripts quote them.
        let text = small().replace("NVIDIA B200", "\"NVIDIA 'B200' $(x) `y` \"\"z\"\" #1\"");
        assert_eq!(
            load(&text).unwrap().rows()[0].model,
            "NVIDIA 'B200' $(x) `y` \"z\" #1"
        );
    }

    #[test]
    fn duplicate_row_is_refused() {
        let mut text = small();
        text.push_str("b200,NVIDIA B200,2,180,182631,7,1,USD,2026-11-29,example price\n");
        assert_eq!(
            message(&text),
            "the catalogue test.csv, row 8, column `days`: duplicates row 3: `b200` for 7 days is already priced there; expected one row per GPU and duration"
        );
    }

    fn with_row2_price(price: &str) -> String {
        small().replacen(",100000,", &format!(",{price},"), 1)
    }

    #[test]
    fn bad_prices_are_refused_with_row_and_column() {
        for (price, says) in [
            ("-100", "`-100` is negative"),
            ("1000.5", "`1000.5` is not a whole number"),
            ("1000.00", "`1000.00` is not a whole number"),
            ("0", "`0` is zero"),
            ("abc", "`abc` is not a number"),
            ("", "is empty"),
            ("99999999999999999999", "is too large"),
        ] {
            let err = message(&with_row2_price(price));
            assert!(
                err.starts_with("the catalogue test.csv, row 2, column `price_cents`: "),
                "{err}"
            );
            assert!(err.contains(says), "{err}");
            assert!(err.contains("whole number of cents"), "{err}");
        }
    }

    #[test]
    fn bad_fields_are_refused() {
        let cases = [
            (
                small().replacen(
                    "b200,NVIDIA B200,2,180,182631,3,",
                    "b200,NVIDIA B200,2,180,182631,5,",
                    1,
                ),
                "row 2, column `days`: `5` days is not an offered duration; expected 3, 7 or 30",
            ),
            (
                small().replacen(
                    "b200,NVIDIA B200,2,180,182631,3,",
                    "B 200,NVIDIA B200,2,180,182631,3,",
                    1,
                ),
                "row 2, column `gpu`: `B 200` is not a GPU slug",
            ),
            (
                small().replacen(
                    "b200,NVIDIA B200,2,180,182631,3,",
                    "b200,,2,180,182631,3,",
                    1,
                ),
                "row 2, column `model`: is empty",
            ),
            (
                small().replacen(
                    "b200,NVIDIA B200,2,180,182631,3,",
                    "b200,NVIDIA B200,0,180,182631,3,",
                    1,
                ),
                "row 2, column `gpus_per_lot`: `0` is zero",
            ),
            (
                small().replacen(
                    "b200,NVIDIA B200,2,180,182631,3,",
                    "b200,NVIDIA B200,2,18.5,182631,3,",
                    1,
                ),
                "row 2, column `vendor_memory_gb`: `18.5` is not a whole number",
            ),
            (
                small().replacen(
                    "b200,NVIDIA B200,2,180,182631,3,",
                    "b200,NVIDIA B200,2,180,0,3,",
                    1,
                ),
                "row 2, column `usable_memory_mib`: `0` is zero; expected a positive whole number: the MiB a CUDA/ROCm process sees",
            ),
            (
                small().replacen("USD,2026-11-29", "usd,2026-11-29", 1),
                "row 2, column `currency`: `usd` is not a currency code",
            ),
            (
                small().replacen("2026-11-29", "2026-02-30", 1),
                "row 2, column `snapshot_date`: `2026-02-30` is not a date",
            ),
            (
                small().replacen("2026-11-29,example price", "2026-11-29,", 1),
                "row 2, column `source`: is empty",
            ),
            (
                small().replacen(
                    "b200,NVIDIA B200,2,180,182631,7,",
                    "b200,NVIDIA B300,2,180,182631,7,",
                    1,
                ),
                "row 3, column `model`: `NVIDIA B300` differs from `NVIDIA B200` on row 2 for GPU `b200`",
            ),
            (
                small().replacen(
                    "b200,NVIDIA B200,2,180,182631,7,",
                    "b200,NVIDIA B200,1,180,182631,7,",
                    1,
                ),
                "row 3, column `gpus_per_lot`: `1` differs from `2` on row 2",
            ),
            (
                small().replacen(
                    "b200,NVIDIA B200,2,180,182631,7,",
                    "b200,NVIDIA B200,2,192,182631,7,",
                    1,
                ),
                "row 3, column `vendor_memory_gb`: `192` differs from `180` on row 2",
            ),
            (
                small().replacen(
                    "b200,NVIDIA B200,2,180,182631,7,",
                    "b200,NVIDIA B200,2,180,182630,7,",
                    1,
                ),
                "row 3, column `usable_memory_mib`: `182630` differs from `182631` on row 2",
            ),
            (
                small().replacen("200000,USD", "200000,EUR", 1),
                "row 3, column `currency`: `EUR` differs from `USD` on row 2",
            ),
            (
                small().replacen(",example price\n", "\n", 1),
                "row 2, column `source`: is missing (the row has 9 fields, the header 10)",
            ),
            (
                small().replacen(",example price\n", ",example price,x\n", 1),
                "row 2, column `#11`: is extra (the row has 11 fields, the header 10)",
            ),
        ];
        for (text, says) in cases {
            let err = message(&text);
            assert!(err.starts_with("the catalogue test.csv, "), "{err}");
            assert!(err.contains(says), "wanted {says:?} in {err}");
        }
    }

    #[test]
    fn header_faults_are_refused() {
        let missing = small().replacen(",days,", ",", 1);
        assert_eq!(
            message(&missing),
            format!(
                "the catalogue test.csv, row 1 (header), column `days`: is missing; expected the columns {HEADER}"
            )
        );
        let unknown = small().replacen("price_cents", "price", 1);
        assert!(message(&unknown).contains("column `price`: is not a catalogue column"));
        let twice = small().replacen("source", "gpu", 1);
        assert!(message(&twice).contains("column `gpu`: appears more than once"));
        // Columns in another order are fine.
        let mut reordered = String::new();
        for line in small().lines() {
            let mut f: Vec<&str> = line.split(',').collect();
            f.swap(0, 9);
            reordered.push_str(&f.join(","));
            reordered.push('\n');
        }
        assert_eq!(
            load(&reordered).unwrap().rows(),
            load(&small()).unwrap().rows()
        );
    }

    #[test]
    fn the_old_memory_column_gets_advice() {
        let old = small().replacen("vendor_memory_gb,usable_memory_mib", "gpu_memory_gib", 1);
        let err = message(&old);
        assert!(
            err.starts_with(
                "the catalogue test.csv, row 1 (header), column `gpu_memory_gib`: was renamed"
            ),
            "{err}"
        );
        assert!(
            err.contains("`vendor_memory_gb`") && err.contains("`usable_memory_mib`"),
            "{err}"
        );
    }

    /// `price --catalogue /dev/zero` read 3.2 GB before this bound: now a reader that never ends
    /// is refused after MAX_CATALOGUE_BYTES + 1 bytes.
    #[test]
    fn an_endless_catalogue_is_refused_at_the_bound() {
        /// Zeros without end, counting what was taken.
        struct Zeros<'a>(&'a mut u64);
        impl Read for Zeros<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                buf.fill(0);
                *self.0 += buf.len() as u64;
                Ok(buf.len())
            }
        }
        let mut read = 0u64;
        let err = Catalogue::from_reader("zero", Zeros(&mut read)).unwrap_err();
        assert!(matches!(err, CatalogueError::TooLarge { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            "the catalogue zero is larger than 33554432 bytes (32 MiB), the largest accepted; \
             expected a CSV file of tariff rows (the bundled one has 45 rows in 11 KB)"
        );
        assert_eq!(read, MAX_CATALOGUE_BYTES + 1);
    }

    #[test]
    fn a_large_file_is_refused_without_reading_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.csv");
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(MAX_CATALOGUE_BYTES + 1).unwrap();
        let err = Catalogue::from_path(&path).unwrap_err();
        assert!(matches!(err, CatalogueError::TooLarge { .. }), "{err}");
        // Exactly at the bound is read (and then judged on its content).
        file.set_len(MAX_CATALOGUE_BYTES).unwrap();
        assert!(!matches!(
            Catalogue::from_path(&path),
            Err(CatalogueError::TooLarge { .. })
        ));
    }

    /// Row numbers of a long file come from one pass: the line counter must agree with counting
    /// from the start for every row, CRLF and quoted line breaks included.
    #[test]
    fn incremental_line_numbers_match_counting_from_the_start() {
        let text = small()
            .replacen("example price\n", "\"example\nprice\"\n", 1)
            .replace('\n', "\r\n");
        let content = text.as_bytes();
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .from_reader(content);
        let mut counter = LineCounter::default();
        let mut lines = Vec::new();
        for record in reader.records() {
            let record = record.unwrap();
            let incremental = counter.line_of(content, record.position());
            assert_eq!(incremental, line_of(content, record.position()));
            lines.push(incremental);
        }
        assert_eq!(lines, [1, 2, 4, 5, 6, 7, 8]);
    }

    /// Validation is linear: the completeness check groups rows with a hash map. A catalogue of
    /// many GPUs, the last one incomplete, names that GPU and its rows.
    #[test]
    fn many_gpus_are_checked_by_hash_lookups() {
        let mut text = format!("{HEADER}\n");
        for g in 0..2000 {
            for d in DURATIONS {
                text.push_str(&format!(
                    "g{g},G {g},1,80,81000,{d},100,USD,2026-11-29,example\n"
                ));
            }
        }
        text.push_str("last,Last,1,80,81000,3,100,USD,2026-11-29,example\n");
        let err = message(&text);
        assert_eq!(
            err,
            "the catalogue test.csv, rows 6002, column `days`: GPU `last` has no 7-day row; expected rows for 3, 7 and 30 days for every GPU"
        );
        let (head, _) = text.rsplit_once("last,").unwrap();
        let c = load(head).unwrap();
        assert_eq!(c.gpus().len(), 2000);
        assert_eq!(c.gpus()[1999], "g1999");
    }

    #[test]
    fn invalid_utf8_is_refused() {
        let mut bytes = small().into_bytes();
        let at = bytes.len() - 3;
        bytes[at] = 0xFF;
        let err = Catalogue::from_reader("test.csv", &bytes[..])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("the catalogue test.csv, row 7: is not valid UTF-8"),
            "{err}"
        );
    }

    #[test]
    fn quoted_fields_with_commas_are_read() {
        let text = small().replacen("example price\n", "\"example price, not a quote\"\n", 1);
        assert_eq!(
            load(&text).unwrap().rows()[0].source,
            "example price, not a quote"
        );
    }

    #[test]
    fn unknown_gpu_suggests_the_nearest() {
        let c = Catalogue::embedded();
        match c.find("h100", 7) {
            Err(PriceError::UnknownGpu { nearest, valid, .. }) => {
                assert_eq!(nearest.as_deref(), Some("h100-sxm"));
                assert_eq!(valid.len(), 15);
            }
            other => panic!("{other:?}"),
        }
        let err = c.find("b20", 7).unwrap_err().to_string();
        assert!(
            err.contains("`b20`") && err.contains("did you mean `b200`") && err.contains("l40s"),
            "{err}"
        );
        let err = c.find("rtx4090", 7).unwrap_err().to_string();
        assert!(err.contains("did you mean `rtx-4090`"), "{err}");
        assert!(matches!(c.find("b200", 5), Err(PriceError::Days(_))));
    }

    #[test]
    fn calendar_dates() {
        for ok in ["2026-11-29", "2024-02-29", "2000-02-29", "2026-12-31"] {
            assert!(is_calendar_date(ok), "{ok}");
        }
        for bad in [
            "2026-13-01",
            "2026-00-10",
            "1900-02-29",
            "2026-1-01",
            "2026/11/29",
            "20261129",
            "2026-11-3x",
        ] {
            assert!(!is_calendar_date(bad), "{bad}");
        }
    }
}

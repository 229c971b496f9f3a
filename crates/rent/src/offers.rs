//! Real hourly offers beside the packages: a SkyPilot catalogue file (`catalogs/v7/<cloud>/vms.csv`
//! of the public `skypilot-org/skypilot-catalog` repository), priced for a package's duration.
//!
//! What is read, and how:
//!
//! - **Columns by name**, in any order: the [`REQUIRED_COLUMNS`] must be there, each once.
//!   [`ZONE_COLUMN`] is optional (Lambda's file has none); [`CURRENCY_COLUMN`] is optional and is
//!   not SkyPilot's (it lets another provider's file in the same shape say its currency). Any
//!   other column (`GpuInfo`) is ignored. Rows are counted as lines of the file, the header being
//!   row 1, and every fault names its row and column. A UTF-8 byte order mark and CRLF line ends
//!   are accepted, surrounding spaces ignored; a file is at most [`MAX_OFFERS_BYTES`].
//! - **Currency**: SkyPilot's prices are USD per hour for the whole instance (all its GPUs), so a
//!   file without a `Currency` column is USD. With one, every row names a currency, and a file
//!   that mixes two is refused with both named and the rows where each first appears: prices in
//!   two currencies are never compared or added.
//! - **Date**: SkyPilot's file carries none, so the date of its prices is the file's modification
//!   time, as a UTC calendar day ([`FileDate`]): the day it was downloaded, unless it was touched
//!   since (`touch -d 2025-06-01 vms.csv` dates an older copy).
//! - **Empty price cells** mean "not offered there": an empty `Price` is no on-demand price in
//!   that row (AWS lists `p5e.48xlarge` with spot prices only), an empty `SpotPrice` no spot
//!   price. An instance type with no price of a kind in any row gets none (`null` in JSON, `none`
//!   in text); the other kind is still priced.
//! - **Pricing**: `days x 24` hours at the hourly price, in whole cents rounded half to even,
//!   computed on integers from the decimal written in the file (never binary floats). On demand
//!   and spot are priced separately, each at its cheapest row (region and zone) for the instance
//!   type; a tie keeps the first row of the file.
//! - **Not priced, but counted**: rows without an accelerator (CPU instances), rows with an
//!   accelerator and no instance type (GCP lists attachable GPUs priced apart from the host VM
//!   they need, so their price is not an instance's), fractions of a GPU (Azure's partitioned
//!   GPUs), and accelerators the [`Mapping`] does not name (listed by name).
//! - **Fit**: an offer is compared through the package table that [`crate::fit::fit`] computed:
//!   the row of the same GPU id and GPU count gives the need per GPU and whether it fits
//!   ([`attach_fit`]). Where the table has no such row (more GPUs than its `--max-gpus`, a count
//!   that is not whole lots, a GPU id outside the catalogue) the offer is still listed with its
//!   price and `fit` is `null`.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::time::SystemTime;

use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;
use serde::Serialize;

use crate::field::FieldProblem;
use crate::fit::FitOption;

/// The columns a SkyPilot catalogue file must have, each once, in any order.
pub const REQUIRED_COLUMNS: [&str; 8] = [
    "InstanceType",
    "AcceleratorName",
    "AcceleratorCount",
    "vCPUs",
    "MemoryGiB",
    "Price",
    "SpotPrice",
    "Region",
];

/// The zone column: optional (SkyPilot's Lambda file has none).
pub const ZONE_COLUMN: &str = "AvailabilityZone";

/// An optional currency column (not SkyPilot's): three capital letters on every row.
pub const CURRENCY_COLUMN: &str = "Currency";

/// The currency of SkyPilot's prices, and of a file without [`CURRENCY_COLUMN`].
pub const SKYPILOT_CURRENCY: &str = "USD";

/// The largest offers file read, in bytes (64 MiB: SkyPilot's largest, AWS's `vms.csv`, takes
/// about 2.5 MB).
pub const MAX_OFFERS_BYTES: u64 = 64 * 1024 * 1024;

/// The most line ends one row may span (a quoted cell may hold line ends; more than this is a
/// quote left open), so that the reader's memory stays bounded whatever the file.
pub const MAX_ROW_LINE_ENDS: usize = 1 << 20;

/// The most distinct priced instance types (instance type, accelerator, count), and the most
/// distinct accelerator names the mapping does not name, one file may hold. The reader keeps one
/// small entry per instance type, not per row, so its memory is bounded by this and not by the
/// file's rows; SkyPilot's files have a few hundred instance types each.
pub const MAX_OFFER_GROUPS: usize = 20_000;

/// Where a file's date comes from.
pub const DATE_SOURCE: &str = "the file's modification time, as a UTC calendar day";

/// The rule every price follows, as printed.
pub const PRICE_RULE: &str = "days x 24 hours at the hourly price, rounded half to even to whole cents; on demand and spot priced separately, each at the cheapest row (region and zone) of the instance type, the first row on a tie";

/// How empty price cells are shown.
pub const EMPTY_CELLS: &str = "an empty Price or SpotPrice cell is no such offer in that row; an instance type with no price of a kind in any row has none (null)";

/// How offers are compared with the model.
pub const FIT_RULE: &str = "from the package table's row of the same GPU id and GPU count (need per GPU against the catalogue's usable memory); null where the table has no such row (more GPUs than --max-gpus, a count that is not whole lots, or a GPU id outside the catalogue)";

/// How the embedded mapping is named.
pub const MAPPING_NAME: &str = "data/skypilot-accelerators.csv (embedded)";

/// The bundled mapping from SkyPilot's `AcceleratorName` to catalogue GPU ids.
pub const MAPPING_CSV: &str = include_str!("../../../data/skypilot-accelerators.csv");

/// The mapping's columns, in this order.
pub const MAPPING_COLUMNS: [&str; 3] = ["accelerator_name", "gpu", "note"];

/// The calendar day an offers file's prices are dated by, and where that day comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileDate {
    /// YYYY-MM-DD.
    pub date: String,
    /// Where it comes from ([`DATE_SOURCE`]).
    pub source: &'static str,
}

impl FileDate {
    /// The UTC day of a modification time.
    pub fn from_system_time(time: SystemTime) -> FileDate {
        let seconds: i64 = match time.duration_since(SystemTime::UNIX_EPOCH) {
            Ok(after) => i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
            Err(before) => {
                -i64::try_from(before.duration().as_secs()).unwrap_or(i64::MAX)
                    - i64::from(before.duration().subsec_nanos() > 0)
            }
        };
        FileDate::from_unix_days(seconds.div_euclid(86_400))
    }

    /// The day `days` after 1970-01-01 (negative: before it).
    pub fn from_unix_days(days: i64) -> FileDate {
        let (year, month, day) = civil_from_days(days);
        FileDate {
            date: format!("{year:04}-{month:02}-{day:02}"),
            source: DATE_SOURCE,
        }
    }
}

/// Howard Hinnant's `civil_from_days`: the proleptic Gregorian date of a day count from
/// 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days.saturating_add(719_468);
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11]
    let day = doy - (153 * mp + 2) / 5 + 1; // [1, 31]
    let month = if mp < 10 { mp + 3 } else { mp - 9 }; // [1, 12]
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month as u32, day as u32)
}

/// One row of an offers file, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferRow {
    /// The row (line of the file, header = 1).
    pub row: u64,
    /// `InstanceType`; empty for GCP's attachable accelerators.
    pub instance_type: String,
    /// `AcceleratorName`; empty for an instance without one.
    pub accelerator_name: String,
    /// `AcceleratorCount` as written (may be a fraction of a GPU); `None` when empty.
    pub accelerator_count: Option<Decimal>,
    /// `vCPUs`; `None` when empty.
    pub vcpus: Option<Decimal>,
    /// `MemoryGiB`; `None` when empty.
    pub memory_gib: Option<Decimal>,
    /// `Price`: on demand, per hour, for the instance; `None` when empty.
    pub price: Option<Decimal>,
    /// `SpotPrice`: spot, per hour, for the instance; `None` when empty.
    pub spot_price: Option<Decimal>,
    /// `Region`.
    pub region: String,
    /// `AvailabilityZone`, where the file has the column and the cell is not empty.
    pub zone: Option<String>,
}

/// A validated offers file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffersFile {
    name: String,
    date: FileDate,
    currency: String,
    currency_from_column: bool,
    rows: Vec<OfferRow>,
}

/// What is wrong with a header column.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OffersHeaderProblem {
    /// A required column is absent.
    #[error(
        "is missing; expected a SkyPilot catalogue with the columns {} (and optionally {ZONE_COLUMN}, {CURRENCY_COLUMN})",
        REQUIRED_COLUMNS.join(",")
    )]
    Missing,
    /// A column named twice.
    #[error("appears more than once; expected each column once")]
    Duplicate,
}

/// An offers file that cannot be used. Every variant names the file; row and column where
/// there is one.
#[derive(Debug, thiserror::Error)]
pub enum OffersError {
    /// The file could not be read.
    #[error("cannot read the offers file {file}: {reason}")]
    Read {
        /// Path or name.
        file: String,
        /// The OS error.
        reason: std::io::Error,
    },
    /// The file's modification time, which dates its prices, is unreadable.
    #[error(
        "cannot date the offers file {file}: its modification time is unreadable ({reason}); the date of its prices is that time"
    )]
    Date {
        /// Path or name.
        file: String,
        /// The OS error.
        reason: std::io::Error,
    },
    /// More than [`MAX_OFFERS_BYTES`].
    #[error(
        "the offers file {file} is {size}, larger than {} bytes (64 MiB), the largest accepted; expected one SkyPilot catalogue file such as catalogs/v7/aws/vms.csv (about 2.5 MB)",
        MAX_OFFERS_BYTES
    )]
    TooLarge {
        /// Path or name.
        file: String,
        /// Its size (`N bytes`), or `more than N bytes` for a stream cut at the limit.
        size: String,
    },
    /// A row holding more line ends than [`MAX_ROW_LINE_ENDS`]: a quote left open.
    #[error(
        "the offers file {file}, row {row}: the row spans more than {limit} line ends (a quote left open?); expected one instance type and region per line"
    )]
    RowLines {
        /// Path or name.
        file: String,
        /// The row (line) where the reader was.
        row: u64,
        /// [`MAX_ROW_LINE_ENDS`].
        limit: usize,
    },
    /// More distinct priced instance types, or unmapped accelerator names, than are kept.
    #[error(
        "the offers file {file}, row {row}: more than {limit} distinct {what}, the most one file is priced with; expected one SkyPilot catalogue file (AWS's has a few hundred instance types)"
    )]
    TooMany {
        /// Path or name.
        file: String,
        /// The row that would go past the limit.
        row: u64,
        /// What is counted.
        what: &'static str,
        /// [`MAX_OFFER_GROUPS`].
        limit: usize,
    },
    /// Nothing (or only blanks and a byte order mark) in the file.
    #[error(
        "the offers file {file} is empty; expected a SkyPilot catalogue CSV with the header {}",
        REQUIRED_COLUMNS.join(",")
    )]
    Empty {
        /// Path or name.
        file: String,
    },
    /// A header and nothing else.
    #[error(
        "the offers file {file} has a header but no rows; expected one row per instance type and region"
    )]
    NoRows {
        /// Path or name.
        file: String,
    },
    /// Not readable as CSV text.
    #[error("the offers file {file}, row {row}: {message}")]
    Syntax {
        /// Path or name.
        file: String,
        /// Row (line) where the reader stopped.
        row: u64,
        /// What the CSV reader said.
        message: String,
    },
    /// A fault in the header.
    #[error("the offers file {file}, row 1 (header), column `{column}`: {problem}")]
    Header {
        /// Path or name.
        file: String,
        /// The column.
        column: String,
        /// What is wrong.
        problem: OffersHeaderProblem,
    },
    /// A fault in one field.
    #[error("the offers file {file}, row {row}, column `{column}`: {problem}")]
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
    /// Two currencies in one file.
    #[error(
        "the offers file {file} mixes currencies in column `{CURRENCY_COLUMN}`: row {first_row} is in {first_currency} and row {row} in {currency}; prices in two currencies are never compared or added, so keep one currency per file"
    )]
    MixedCurrencies {
        /// Path or name.
        file: String,
        /// The first row's currency.
        first_currency: String,
        /// The first row.
        first_row: u64,
        /// The other currency.
        currency: String,
        /// The first row in it.
        row: u64,
    },
    /// A price for the duration beyond what whole cents in a u64 hold.
    #[error(
        "the offers file {file}, row {row}, column `{column}`: `{value}` per hour for {hours} hours does not fit in whole cents (at most 18446744073709551615)"
    )]
    Overflow {
        /// Path or name.
        file: String,
        /// Row.
        row: u64,
        /// `Price` or `SpotPrice`.
        column: &'static str,
        /// The hourly price.
        value: String,
        /// Hours priced.
        hours: u64,
    },
}

/// An offers file opened for reading: its name, date and a reader of its bytes, size checked.
struct Opened {
    file: String,
    date: FileDate,
    reader: std::fs::File,
}

impl Opened {
    /// Opens `path`, refuses it over [`MAX_OFFERS_BYTES`] (naming its size) and dates it.
    fn path(path: &Path) -> Result<Opened, OffersError> {
        let file = path.display().to_string();
        let reader = lab_io::files::open_input(path).map_err(|reason| OffersError::Read {
            file: file.clone(),
            reason,
        })?;
        let meta = reader.metadata().map_err(|reason| OffersError::Date {
            file: file.clone(),
            reason,
        })?;
        if meta.is_file() && meta.len() > MAX_OFFERS_BYTES {
            return Err(OffersError::TooLarge {
                file,
                size: format!("{} bytes", meta.len()),
            });
        }
        let modified = meta.modified().map_err(|reason| OffersError::Date {
            file: file.clone(),
            reason,
        })?;
        Ok(Opened {
            file,
            date: FileDate::from_system_time(modified),
            reader,
        })
    }
}

impl OffersFile {
    /// Loads and validates an offers file, dated by its modification time; messages name it by
    /// the path as given. Every row is kept: [`read`] is the bounded way to price a file.
    pub fn from_path(path: &Path) -> Result<OffersFile, OffersError> {
        let opened = Opened::path(path)?;
        OffersFile::from_reader(&opened.file, opened.date, opened.reader)
    }

    /// Loads and validates an offers file from any reader, with the date given.
    pub fn from_reader(
        name: &str,
        date: FileDate,
        reader: impl Read,
    ) -> Result<OffersFile, OffersError> {
        let mut rows = Vec::new();
        let read = Parser {
            file: name.to_string(),
        }
        .parse(reader, |row| {
            rows.push(row);
            Ok(())
        })?;
        Ok(OffersFile {
            name: name.to_string(),
            date,
            currency_from_column: read.currency.is_some(),
            currency: read
                .currency
                .unwrap_or_else(|| SKYPILOT_CURRENCY.to_string()),
            rows,
        })
    }

    /// The name given at load.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The date of its prices.
    pub fn date(&self) -> &FileDate {
        &self.date
    }

    /// The one currency of its prices.
    pub fn currency(&self) -> &str {
        &self.currency
    }

    /// Every row, in file order.
    pub fn rows(&self) -> &[OfferRow] {
        &self.rows
    }

    /// Where the currency comes from, as printed.
    pub fn currency_source(&self) -> &'static str {
        currency_source(self.currency_from_column)
    }
}

/// Where the currency comes from, as printed: the file's column, or SkyPilot's rule.
fn currency_source(from_column: bool) -> &'static str {
    if from_column {
        "the file's Currency column (one currency on every row)"
    } else {
        "SkyPilot's catalogue prices are USD per hour for the whole instance; the file has no Currency column"
    }
}

/// One accelerator name of the mapping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MappingRow {
    /// SkyPilot's `AcceleratorName` (matched without regard to ASCII case).
    pub accelerator_name: String,
    /// The catalogue GPU id.
    pub gpu: String,
    /// Why, and what the name covers.
    pub note: String,
}

/// SkyPilot accelerator names to catalogue GPU ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    name: String,
    rows: Vec<MappingRow>,
    by_name: HashMap<String, usize>,
}

/// A mapping file that cannot be used: the row and column, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the accelerator mapping {file}, row {row}, column `{column}`: {message}")]
pub struct MappingError {
    /// Path or name.
    pub file: String,
    /// Row (line, header = 1).
    pub row: u64,
    /// Column.
    pub column: String,
    /// What is wrong.
    pub message: String,
}

impl Mapping {
    /// The bundled mapping, `data/skypilot-accelerators.csv`; its tests load it, so it cannot fail.
    pub fn embedded() -> Mapping {
        match Mapping::from_reader(MAPPING_NAME, MAPPING_CSV.as_bytes()) {
            Ok(mapping) => mapping,
            // Unreachable in a tested build: `embedded_mapping_names_catalogue_gpus` loads it.
            Err(err) => panic!("the embedded accelerator mapping is invalid: {err}"),
        }
    }

    /// Loads and validates a mapping: the header `accelerator_name,gpu,note`, then one row per
    /// name, each name once (ASCII case ignored), each GPU id a slug.
    pub fn from_reader(name: &str, reader: impl Read) -> Result<Mapping, MappingError> {
        let fault = |row: u64, column: &str, message: String| MappingError {
            file: name.to_string(),
            row,
            column: column.to_string(),
            message,
        };
        let mut reader = crate::rows::reader(reader);
        let mut records = reader.records();
        let header = match records.next() {
            Some(Ok(h)) => h,
            _ => {
                return Err(fault(
                    1,
                    MAPPING_COLUMNS[0],
                    format!("expected the header {}", MAPPING_COLUMNS.join(",")),
                ));
            }
        };
        for (at, want) in MAPPING_COLUMNS.iter().enumerate() {
            if header.get(at) != Some(*want) || header.len() != MAPPING_COLUMNS.len() {
                return Err(fault(
                    1,
                    header.get(at).unwrap_or(*want),
                    format!("expected the header {}", MAPPING_COLUMNS.join(",")),
                ));
            }
        }
        let mut rows: Vec<MappingRow> = Vec::new();
        let mut by_name: HashMap<String, usize> = HashMap::new();
        let mut first_rows: Vec<u64> = Vec::new();
        for record in records {
            let record = record.map_err(|err| fault(0, "#1", err.to_string()))?;
            let row = record.position().map_or(0, |p| p.line());
            if record.len() != MAPPING_COLUMNS.len() {
                return Err(fault(
                    row,
                    MAPPING_COLUMNS[record.len().min(2)],
                    format!(
                        "the row has {} fields; expected {}",
                        record.len(),
                        MAPPING_COLUMNS.len()
                    ),
                ));
            }
            let (accelerator_name, gpu, note) = (&record[0], &record[1], &record[2]);
            for (column, value) in MAPPING_COLUMNS.iter().zip([accelerator_name, gpu, note]) {
                if value.is_empty() {
                    return Err(fault(row, column, "is empty".to_string()));
                }
            }
            if !gpu
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            {
                return Err(fault(
                    row,
                    "gpu",
                    format!("`{gpu}` is not a GPU id; expected lowercase letters, digits and `-`"),
                ));
            }
            let key = accelerator_name.to_ascii_uppercase();
            if let Some(&at) = by_name.get(&key) {
                return Err(fault(
                    row,
                    "accelerator_name",
                    format!(
                        "`{accelerator_name}` is already mapped on row {}; expected each name once",
                        first_rows[at]
                    ),
                ));
            }
            by_name.insert(key, rows.len());
            first_rows.push(row);
            rows.push(MappingRow {
                accelerator_name: accelerator_name.to_string(),
                gpu: gpu.to_string(),
                note: note.to_string(),
            });
        }
        Ok(Mapping {
            name: name.to_string(),
            rows,
            by_name,
        })
    }

    /// The name given at load.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every row, in file order.
    pub fn rows(&self) -> &[MappingRow] {
        &self.rows
    }

    /// The catalogue GPU id of a SkyPilot accelerator name, ASCII case ignored.
    pub fn gpu(&self, accelerator_name: &str) -> Option<&str> {
        self.by_name
            .get(&accelerator_name.to_ascii_uppercase())
            .map(|&at| self.rows[at].gpu.as_str())
    }
}

/// One price of an offer: the cheapest row of its kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OfferPrice {
    /// Per hour for the whole instance, as written in the file.
    pub hourly: Decimal,
    /// hourly x hours, in whole cents, half to even.
    pub total_cents: u64,
    /// The row's region.
    pub region: String,
    /// The row's zone, where the file has one.
    pub zone: Option<String>,
    /// The row (line of the file).
    pub row: u64,
}

/// How an offer compares with the model, from the package table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OfferFit {
    /// The table's need per GPU: ceil(model bytes / GPUs) + the reserve.
    pub per_gpu_bytes: u128,
    /// The catalogue's usable memory of one GPU.
    pub usable_bytes_per_gpu: u128,
    /// need <= usable.
    pub fits: bool,
    /// usable - need.
    pub headroom_bytes: i128,
    /// Whether the GPU count divides the attention and KV heads (null when unknown).
    pub heads_divisible: Option<bool>,
}

/// One instance type of the file, priced for one duration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Offer {
    /// `InstanceType`.
    pub instance_type: String,
    /// `AcceleratorName`.
    pub accelerator_name: String,
    /// The catalogue GPU id it maps to.
    pub gpu: String,
    /// GPUs in the instance.
    pub gpus: u32,
    /// `vCPUs` of its first row.
    pub vcpus: Option<Decimal>,
    /// `MemoryGiB` of its first row.
    pub memory_gib: Option<Decimal>,
    /// The duration priced.
    pub days: u32,
    /// days x 24.
    pub hours: u64,
    /// ISO 4217 code of every price of the file.
    pub currency: String,
    /// The cheapest on-demand row; null when no row has a `Price`.
    pub on_demand: Option<OfferPrice>,
    /// The cheapest spot row; null when no row has a `SpotPrice`.
    pub spot: Option<OfferPrice>,
    /// From the package table; null where it has no row of this GPU and count.
    pub fit: Option<OfferFit>,
    /// The file, as given.
    pub file: String,
    /// The date of its prices.
    pub date: String,
}

/// Rows of one accelerator name that the mapping does not name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unmapped {
    /// `AcceleratorName`.
    pub accelerator_name: String,
    /// How many rows.
    pub rows: u64,
    /// The first of them.
    pub first_row: u64,
}

/// The rows that are not priced, by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// No accelerator (CPU instances).
    pub without_accelerator: u64,
    /// An accelerator without an instance type (priced apart from its host VM).
    pub accelerator_only: u64,
    /// A fraction of a GPU.
    pub fractional_gpus: u64,
    /// Accelerators the mapping does not name, in file order.
    pub unmapped: Vec<Unmapped>,
}

/// The offers of a file, priced for the durations asked, beside the package table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OffersSection {
    /// The file, as given.
    pub file: String,
    /// The date of its prices (YYYY-MM-DD).
    pub date: String,
    /// Where the date comes from.
    pub date_source: &'static str,
    /// The one currency of its prices.
    pub currency: String,
    /// Where the currency comes from.
    pub currency_source: &'static str,
    /// The accelerator mapping used.
    pub mapping: String,
    /// Rows read (header excluded).
    pub rows: u64,
    /// How every price is computed.
    pub price_rule: &'static str,
    /// How empty cells are shown.
    pub empty_cells: &'static str,
    /// How `fit` is filled.
    pub fit_rule: &'static str,
    /// Rows not priced.
    pub skipped: Skipped,
    /// Instance types priced: the offers of each duration before `limit`.
    pub instance_types: u64,
    /// At most this many offers of each duration are listed (the first by the order below);
    /// null: every one.
    pub limit: Option<usize>,
    /// One per instance type and duration: by duration, then fitting first, then cheapest on
    /// demand, then cheapest spot, then instance type; at most `limit` of each duration.
    pub offers: Vec<Offer>,
}

/// `hourly x hours` in whole cents, rounded half to even, exactly: the decimal's digits times
/// hours x 100, divided by its power of ten on integers. `None` when it does not fit a u64.
pub fn cents_for_hours(hourly: Decimal, hours: u64) -> Option<u64> {
    let digits = u128::try_from(hourly.mantissa()).ok()?;
    let scaled = digits.checked_mul(u128::from(hours))?.checked_mul(100)?;
    // The scale is at most 28: 10^28 < 2^128.
    let divisor = 10u128.pow(hourly.scale());
    let quotient = scaled / divisor;
    let remainder = scaled % divisor;
    // remainder < divisor <= 10^28, so twice it fits.
    let round_up = 2 * remainder > divisor || (2 * remainder == divisor && quotient % 2 == 1);
    u64::try_from(quotient + u128::from(round_up)).ok()
}

/// Prices every mapped, whole-GPU instance type of `file` for each of `days` (3, 7 or 30: the
/// package durations), with `fit` left empty ([`attach_fit`] fills it).
pub fn price(
    file: &OffersFile,
    mapping: &Mapping,
    days: &[u32],
) -> Result<OffersSection, OffersError> {
    let mut pricer = Pricer::new(file.name(), mapping);
    for row in file.rows() {
        pricer.add(row.clone())?;
    }
    let head = Head {
        file: file.name().to_string(),
        date: file.date().clone(),
        currency: file.currency().to_string(),
        currency_from_column: file.currency_from_column,
    };
    pricer.finish(&head, days, None, None)
}

/// Reads the offers file at `path` row by row and prices it as [`price`] and [`attach_fit`] do,
/// keeping one entry per instance type (never the rows) and building only the offers listed:
/// at most `limit` of each duration (the first by the order of [`attach_fit`]), or every one.
/// The file is refused over [`MAX_OFFERS_BYTES`], and past [`MAX_OFFER_GROUPS`] instance types.
pub fn read(
    path: &Path,
    mapping: &Mapping,
    days: &[u32],
    options: &[FitOption],
    limit: Option<usize>,
) -> Result<OffersSection, OffersError> {
    let opened = Opened::path(path)?;
    let mut pricer = Pricer::new(&opened.file, mapping);
    let parsed = Parser {
        file: opened.file.clone(),
    }
    .parse(opened.reader, |row| pricer.add(row))?;
    let head = Head {
        file: opened.file.clone(),
        date: opened.date,
        currency_from_column: parsed.currency.is_some(),
        currency: parsed
            .currency
            .unwrap_or_else(|| SKYPILOT_CURRENCY.to_string()),
    };
    pricer.finish(&head, days, Some(options), limit)
}

/// What a section says of its file.
struct Head {
    file: String,
    date: FileDate,
    currency: String,
    currency_from_column: bool,
}

/// The cheapest row of one kind of an instance type so far.
struct Best {
    hourly: Decimal,
    row: u64,
    region: String,
    zone: Option<String>,
}

/// One instance type (instance type, accelerator name, GPU count): its first row's sizes and
/// its cheapest rows so far.
struct Group {
    instance_type: String,
    accelerator_name: String,
    gpu: String,
    gpus: u32,
    vcpus: Option<Decimal>,
    memory_gib: Option<Decimal>,
    on_demand: Option<Best>,
    spot: Option<Best>,
}

/// Takes rows in file order and keeps what pricing needs: one [`Group`] per instance type and
/// the counts of rows not priced. Its memory is bounded by [`MAX_OFFER_GROUPS`], not by rows.
struct Pricer<'m> {
    file: String,
    mapping: &'m Mapping,
    rows: u64,
    skipped: Skipped,
    unmapped_at: HashMap<String, usize>,
    groups: Vec<Group>,
    group_at: HashMap<(String, String, u32), usize>,
}

impl<'m> Pricer<'m> {
    fn new(file: &str, mapping: &'m Mapping) -> Pricer<'m> {
        Pricer {
            file: file.to_string(),
            mapping,
            rows: 0,
            skipped: Skipped::default(),
            unmapped_at: HashMap::new(),
            groups: Vec::new(),
            group_at: HashMap::new(),
        }
    }

    fn too_many(&self, row: u64, what: &'static str) -> OffersError {
        OffersError::TooMany {
            file: self.file.clone(),
            row,
            what,
            limit: MAX_OFFER_GROUPS,
        }
    }

    fn add(&mut self, row: OfferRow) -> Result<(), OffersError> {
        self.rows += 1;
        let Some(count) = row
            .accelerator_count
            .filter(|_| !row.accelerator_name.is_empty())
        else {
            self.skipped.without_accelerator += 1;
            return Ok(());
        };
        if row.instance_type.is_empty() {
            self.skipped.accelerator_only += 1;
            return Ok(());
        }
        if !count.fract().is_zero() {
            self.skipped.fractional_gpus += 1;
            return Ok(());
        }
        // Validated on load: a positive whole count within u32 is all that remains.
        let Some(gpus) = count.to_u32().filter(|g| *g > 0) else {
            self.skipped.fractional_gpus += 1;
            return Ok(());
        };
        let mapping = self.mapping;
        let Some(gpu) = mapping.gpu(&row.accelerator_name) else {
            let at = match self.unmapped_at.get(row.accelerator_name.as_str()) {
                Some(&at) => at,
                None => {
                    if self.skipped.unmapped.len() >= MAX_OFFER_GROUPS {
                        return Err(self.too_many(
                            row.row,
                            "accelerator names that the mapping does not name",
                        ));
                    }
                    self.skipped.unmapped.push(Unmapped {
                        accelerator_name: row.accelerator_name.clone(),
                        rows: 0,
                        first_row: row.row,
                    });
                    let at = self.skipped.unmapped.len() - 1;
                    self.unmapped_at.insert(row.accelerator_name.clone(), at);
                    at
                }
            };
            self.skipped.unmapped[at].rows += 1;
            return Ok(());
        };
        // Looked up by borrowed strings first: a key is only built for a new instance type.
        let key = (row.instance_type, row.accelerator_name, gpus);
        let at = match self.group_at.get(&key) {
            Some(&at) => at,
            None => {
                if self.groups.len() >= MAX_OFFER_GROUPS {
                    return Err(self.too_many(row.row, "priced instance types"));
                }
                self.groups.push(Group {
                    instance_type: key.0.clone(),
                    accelerator_name: key.1.clone(),
                    gpu: gpu.to_string(),
                    gpus,
                    vcpus: row.vcpus,
                    memory_gib: row.memory_gib,
                    on_demand: None,
                    spot: None,
                });
                let at = self.groups.len() - 1;
                self.group_at.insert(key, at);
                at
            }
        };
        let group = &mut self.groups[at];
        let best = |hourly: Decimal| Best {
            hourly,
            row: row.row,
            region: row.region.clone(),
            zone: row.zone.clone(),
        };
        // Strictly cheaper replaces: a tie keeps the first row.
        if let Some(p) = row.price
            && group.on_demand.as_ref().is_none_or(|b| p < b.hourly)
        {
            group.on_demand = Some(best(p));
        }
        if let Some(p) = row.spot_price
            && group.spot.as_ref().is_none_or(|b| p < b.hourly)
        {
            group.spot = Some(best(p));
        }
        Ok(())
    }

    /// The section: every total checked (an overflow anywhere is an error, as if every offer were
    /// listed), then for each duration the first `limit` offers by [`sort_offers`]' order, each
    /// built only once chosen. `options`: the package table to take `fit` from (`None`: no fit).
    fn finish(
        self,
        head: &Head,
        days: &[u32],
        options: Option<&[FitOption]>,
        limit: Option<usize>,
    ) -> Result<OffersSection, OffersError> {
        let quote = |best: &Best, column: &'static str, hours: u64| {
            let total_cents =
                cents_for_hours(best.hourly, hours).ok_or_else(|| OffersError::Overflow {
                    file: self.file.clone(),
                    row: best.row,
                    column,
                    value: best.hourly.to_string(),
                    hours,
                })?;
            Ok::<_, OffersError>(OfferPrice {
                hourly: best.hourly,
                total_cents,
                region: best.region.clone(),
                zone: best.zone.clone(),
                row: best.row,
            })
        };
        // In the order offers were priced before any was chosen: duration, then instance type
        // in file order, on demand before spot.
        for &d in days {
            let hours = u64::from(d) * 24;
            for g in &self.groups {
                if let Some(b) = &g.on_demand {
                    quote(b, "Price", hours)?;
                }
                if let Some(b) = &g.spot {
                    quote(b, "SpotPrice", hours)?;
                }
            }
        }
        let mut by_gpu: HashMap<(&str, u64), &FitOption> = HashMap::new();
        for o in options.unwrap_or_default() {
            by_gpu.entry((o.gpu.as_str(), o.total_gpus)).or_insert(o);
        }
        let fits: Vec<Option<OfferFit>> = self
            .groups
            .iter()
            .map(|g| {
                by_gpu
                    .get(&(g.gpu.as_str(), u64::from(g.gpus)))
                    .map(|o| OfferFit {
                        per_gpu_bytes: o.per_gpu_bytes,
                        usable_bytes_per_gpu: o.usable_bytes_per_gpu,
                        fits: o.fits,
                        headroom_bytes: o.headroom_bytes,
                        heads_divisible: o.heads_divisible,
                    })
            })
            .collect();
        let mut ordered_days = days.to_vec();
        ordered_days.sort_unstable();
        let mut offers = Vec::new();
        for d in ordered_days {
            let hours = u64::from(d) * 24;
            let cents = |b: &Option<Best>| {
                b.as_ref()
                    .and_then(|b| cents_for_hours(b.hourly, hours))
                    .unwrap_or(u64::MAX)
            };
            // sort_offers' key, with the file order of instance types last (its sort is stable).
            let mut keys: Vec<(u8, u64, u64, usize)> = self
                .groups
                .iter()
                .zip(&fits)
                .enumerate()
                .map(|(at, (g, fit))| {
                    (
                        fit_rank(fit.as_ref()),
                        cents(&g.on_demand),
                        cents(&g.spot),
                        at,
                    )
                })
                .collect();
            let order = |a: &(u8, u64, u64, usize), b: &(u8, u64, u64, usize)| {
                (a.0, a.1, a.2)
                    .cmp(&(b.0, b.1, b.2))
                    .then_with(|| {
                        self.groups[a.3]
                            .instance_type
                            .cmp(&self.groups[b.3].instance_type)
                    })
                    .then(a.3.cmp(&b.3))
            };
            if let Some(k) = limit
                && k < keys.len()
            {
                if k == 0 {
                    keys.clear();
                } else {
                    keys.select_nth_unstable_by(k - 1, order);
                    keys.truncate(k);
                }
            }
            keys.sort_unstable_by(order);
            for (_, _, _, at) in keys {
                let g = &self.groups[at];
                offers.push(Offer {
                    instance_type: g.instance_type.clone(),
                    accelerator_name: g.accelerator_name.clone(),
                    gpu: g.gpu.clone(),
                    gpus: g.gpus,
                    vcpus: g.vcpus,
                    memory_gib: g.memory_gib,
                    days: d,
                    hours,
                    currency: head.currency.clone(),
                    on_demand: g
                        .on_demand
                        .as_ref()
                        .map(|b| quote(b, "Price", hours))
                        .transpose()?,
                    spot: g
                        .spot
                        .as_ref()
                        .map(|b| quote(b, "SpotPrice", hours))
                        .transpose()?,
                    fit: fits[at].clone(),
                    file: head.file.clone(),
                    date: head.date.date.clone(),
                });
            }
        }
        if self.rows == 0 {
            return Err(OffersError::NoRows { file: self.file });
        }
        Ok(OffersSection {
            file: head.file.clone(),
            date: head.date.date.clone(),
            date_source: head.date.source,
            currency: head.currency.clone(),
            currency_source: currency_source(head.currency_from_column),
            mapping: self.mapping.name().to_string(),
            rows: self.rows,
            price_rule: PRICE_RULE,
            empty_cells: EMPTY_CELLS,
            fit_rule: FIT_RULE,
            skipped: self.skipped,
            instance_types: self.groups.len() as u64,
            limit,
            offers,
        })
    }
}

/// Fitting first, unknown next, not fitting last.
fn fit_rank(fit: Option<&OfferFit>) -> u8 {
    match fit {
        Some(f) if f.fits => 0,
        None => 1,
        Some(_) => 2,
    }
}

/// By duration; fitting first, unknown next, not fitting last; then cheapest on demand, then
/// cheapest spot (an absent price after any present one); then by instance type. Stable.
fn sort_offers(offers: &mut [Offer]) {
    offers.sort_by(|a, b| {
        let key = |o: &Offer| {
            (
                o.days,
                fit_rank(o.fit.as_ref()),
                o.on_demand.as_ref().map_or(u64::MAX, |p| p.total_cents),
                o.spot.as_ref().map_or(u64::MAX, |p| p.total_cents),
            )
        };
        key(a)
            .cmp(&key(b))
            .then_with(|| a.instance_type.cmp(&b.instance_type))
    });
}

/// Fills each offer's `fit` from the package table of [`crate::fit::fit`]: the first row of the
/// same GPU id and GPU count (the need per GPU does not depend on the duration), then sorts the
/// offers again. An offer the table has no row for keeps `fit: None`.
pub fn attach_fit(section: &mut OffersSection, options: &[FitOption]) {
    let mut by_gpu: HashMap<(&str, u64), &FitOption> = HashMap::new();
    for o in options {
        by_gpu.entry((o.gpu.as_str(), o.total_gpus)).or_insert(o);
    }
    for offer in &mut section.offers {
        offer.fit = by_gpu
            .get(&(offer.gpu.as_str(), u64::from(offer.gpus)))
            .map(|o| OfferFit {
                per_gpu_bytes: o.per_gpu_bytes,
                usable_bytes_per_gpu: o.usable_bytes_per_gpu,
                fits: o.fits,
                headroom_bytes: o.headroom_bytes,
                heads_divisible: o.heads_divisible,
            });
    }
    sort_offers(&mut section.offers);
}

/// What a numeric column holds, for messages.
const PRICE_EXPECTED: &str =
    "a positive hourly price such as 98.32, or an empty cell where none is offered";
const COUNT_EXPECTED: &str = "the number of accelerators, such as 8.0, or an empty cell for none";
const SIZE_EXPECTED: &str = "a non-negative number, or an empty cell";

/// Reads rows and checks each fault in the order a reader meets it.
struct Parser {
    file: String,
}

/// What a whole file said besides its rows.
struct Parsed {
    /// Rows read (header excluded).
    #[allow(dead_code)]
    rows: u64,
    /// The file's one currency, when it has the column.
    currency: Option<String>,
}

/// Why [`Tracked`] stopped reading.
#[derive(Debug, Clone, Copy)]
enum Over {
    /// Past [`MAX_OFFERS_BYTES`].
    File,
    /// One row past [`MAX_ROW_LINE_ENDS`].
    Row,
}

/// The file's bytes on their way to the CSV reader, with the line ends not yet behind the
/// current record, so that a record's row is the line an editor shows without keeping the file:
/// the CSV reader's own line count drifts on CRLF files (a record seems to start at the LF of
/// the line before) and before blank lines, as [`crate::rows::line_of`] says.
struct Tracked<R> {
    inner: R,
    /// Bytes passed on.
    read: u64,
    /// Offsets of CR (false) and LF (true) bytes at or after the current record's start.
    ends: std::collections::VecDeque<(u64, bool)>,
    /// LFs before them.
    behind: u64,
    /// Nothing but ASCII blanks passed on so far.
    only_blanks: bool,
    over: Option<Over>,
}

impl<R: Read> Tracked<R> {
    fn new(inner: R) -> Tracked<R> {
        Tracked {
            inner,
            read: 0,
            ends: std::collections::VecDeque::new(),
            behind: 0,
            only_blanks: true,
            over: None,
        }
    }

    /// The line (from 1) of the record the CSV reader says starts at `byte`: the line ends at
    /// that offset are skipped, then the LFs before it counted. Records come in file order.
    fn line_of(&mut self, byte: u64) -> u64 {
        while let Some(&(at, lf)) = self.ends.front()
            && at < byte
        {
            self.behind += u64::from(lf);
            self.ends.pop_front();
        }
        let mut cursor = byte;
        while let Some(&(at, lf)) = self.ends.front()
            && at == cursor
        {
            self.behind += u64::from(lf);
            self.ends.pop_front();
            cursor += 1;
        }
        self.behind + 1
    }

    /// The line where the bytes passed on end.
    fn line_at_head(&self) -> u64 {
        self.behind + self.ends.iter().filter(|(_, lf)| *lf).count() as u64 + 1
    }
}

impl<R: Read> Read for Tracked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.over.is_some() {
            return Err(std::io::Error::other("the offers file is past a limit"));
        }
        let n = self.inner.read(buf)?;
        for (i, b) in buf[..n].iter().enumerate() {
            match b {
                b'\n' | b'\r' => self.ends.push_back((self.read + i as u64, *b == b'\n')),
                b if b.is_ascii_whitespace() => {}
                _ => self.only_blanks = false,
            }
        }
        self.read += n as u64;
        if self.read > MAX_OFFERS_BYTES {
            self.over = Some(Over::File);
        } else if self.ends.len() > MAX_ROW_LINE_ENDS {
            self.over = Some(Over::Row);
        }
        if self.over.is_some() {
            return Err(std::io::Error::other("the offers file is past a limit"));
        }
        Ok(n)
    }
}

/// Column positions.
struct Index {
    columns: HashMap<&'static str, usize>,
    zone: Option<usize>,
    currency: Option<usize>,
}

impl Parser {
    fn field_error(&self, row: u64, column: &str, problem: FieldProblem) -> OffersError {
        OffersError::Field {
            file: self.file.clone(),
            row,
            column: column.to_string(),
            problem: Box::new(problem),
        }
    }

    /// A reader error as the file's fault: where the reader was, and what it met.
    fn read_error<R: Read>(
        &self,
        reader: &mut csv::Reader<Tracked<R>>,
        err: &csv::Error,
    ) -> OffersError {
        let tracked = reader.get_mut();
        match tracked.over {
            Some(Over::File) => {
                return OffersError::TooLarge {
                    file: self.file.clone(),
                    size: format!("more than {MAX_OFFERS_BYTES} bytes"),
                };
            }
            Some(Over::Row) => {
                return OffersError::RowLines {
                    file: self.file.clone(),
                    row: tracked.line_at_head(),
                    limit: MAX_ROW_LINE_ENDS,
                };
            }
            None => {}
        }
        if let csv::ErrorKind::Io(reason) = err.kind() {
            return OffersError::Read {
                file: self.file.clone(),
                reason: std::io::Error::new(reason.kind(), reason.to_string()),
            };
        }
        let row = err.position().map_or(0, |p| tracked.line_of(p.byte()));
        let message = match err.kind() {
            csv::ErrorKind::Utf8 { .. } => {
                "is not valid UTF-8 text; expected a UTF-8 CSV file".to_string()
            }
            _ => err.to_string(),
        };
        OffersError::Syntax {
            file: self.file.clone(),
            row,
            message,
        }
    }

    /// Reads `reader` record by record (a UTF-8 byte order mark skipped), checks every row in
    /// file order and hands each to `each`; nothing but the current record is held.
    fn parse(
        &self,
        mut reader: impl Read,
        mut each: impl FnMut(OfferRow) -> Result<(), OffersError>,
    ) -> Result<Parsed, OffersError> {
        // The byte order mark, if any, is not part of the text the reader counts offsets in.
        let mut head = [0u8; 3];
        let mut got = 0;
        while got < head.len() {
            match reader.read(&mut head[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(reason) => {
                    return Err(OffersError::Read {
                        file: self.file.clone(),
                        reason,
                    });
                }
            }
        }
        let skip = if head[..got] == *b"\xEF\xBB\xBF" {
            3
        } else {
            0
        };
        let prefix = std::io::Cursor::new(head[skip..got].to_vec());
        let mut reader = crate::rows::reader(Tracked::new(prefix.chain(reader)));
        let mut header = csv::StringRecord::new();
        match reader.read_record(&mut header) {
            Ok(true) => {}
            Ok(false) => {
                return Err(OffersError::Empty {
                    file: self.file.clone(),
                });
            }
            Err(err) => return Err(self.read_error(&mut reader, &err)),
        }
        let index = match self.header_index(&header) {
            Ok(index) => index,
            Err(err) => {
                // Blanks only (the reader sees a blank line as an empty header): an empty file.
                if header.iter().all(str::is_empty) && self.only_blanks(&mut reader) {
                    return Err(OffersError::Empty {
                        file: self.file.clone(),
                    });
                }
                return Err(err);
            }
        };
        let width = header.len();
        let mut rows = 0u64;
        let mut first_currency: Option<(String, u64)> = None;
        let mut record = csv::StringRecord::new();
        loop {
            match reader.read_record(&mut record) {
                Ok(true) => {}
                Ok(false) => break,
                Err(err) => return Err(self.read_error(&mut reader, &err)),
            }
            let row = record
                .position()
                .map_or(0, |p| reader.get_mut().line_of(p.byte()));
            rows += 1;
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
            let get = |column: &'static str, at: usize| -> Result<&str, OffersError> {
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
            let field = |column: &'static str| get(column, index.columns[column]);
            let instance_type = field("InstanceType")?;
            let accelerator_name = field("AcceleratorName")?;
            let count_text = field("AcceleratorCount")?;
            let accelerator_count =
                self.decimal(row, "AcceleratorCount", count_text, COUNT_EXPECTED, false)?;
            if accelerator_name.is_empty() && accelerator_count.is_some_and(|c| !c.is_zero()) {
                return Err(self.field_error(
                    row,
                    "AcceleratorName",
                    FieldProblem::Unnamed {
                        count: count_text.to_string(),
                    },
                ));
            }
            if !accelerator_name.is_empty() {
                match accelerator_count {
                    None => {
                        return Err(self.field_error(
                            row,
                            "AcceleratorCount",
                            FieldProblem::Empty {
                                expected: "the number of accelerators named in AcceleratorName",
                            },
                        ));
                    }
                    Some(c) if c.is_zero() => {
                        return Err(self.field_error(
                            row,
                            "AcceleratorCount",
                            FieldProblem::Zero {
                                value: count_text.to_string(),
                                expected: "the number of accelerators named in AcceleratorName",
                            },
                        ));
                    }
                    Some(c) if c.trunc() > Decimal::from(u32::MAX) => {
                        return Err(self.field_error(
                            row,
                            "AcceleratorCount",
                            FieldProblem::Inexact {
                                value: count_text.to_string(),
                                expected: "at most 4294967295 accelerators",
                            },
                        ));
                    }
                    Some(_) => {}
                }
            }
            if instance_type.is_empty() && accelerator_name.is_empty() {
                return Err(self.field_error(row, "InstanceType", FieldProblem::Nothing));
            }
            let vcpus = self.decimal(row, "vCPUs", field("vCPUs")?, SIZE_EXPECTED, false)?;
            let memory_gib =
                self.decimal(row, "MemoryGiB", field("MemoryGiB")?, SIZE_EXPECTED, false)?;
            let price = self.decimal(row, "Price", field("Price")?, PRICE_EXPECTED, true)?;
            let spot_price =
                self.decimal(row, "SpotPrice", field("SpotPrice")?, PRICE_EXPECTED, true)?;
            let region = field("Region")?;
            if region.is_empty() {
                return Err(self.field_error(
                    row,
                    "Region",
                    FieldProblem::Empty {
                        expected: "the region of the offer",
                    },
                ));
            }
            let zone = match index.zone {
                Some(at) => Some(get(ZONE_COLUMN, at)?).filter(|z| !z.is_empty()),
                None => None,
            };
            if let Some(at) = index.currency {
                let value = get(CURRENCY_COLUMN, at)?;
                if value.is_empty() {
                    return Err(self.field_error(
                        row,
                        CURRENCY_COLUMN,
                        FieldProblem::Empty {
                            expected: "a currency code such as USD",
                        },
                    ));
                }
                if value.len() != 3 || !value.bytes().all(|b| b.is_ascii_uppercase()) {
                    return Err(self.field_error(
                        row,
                        CURRENCY_COLUMN,
                        FieldProblem::Currency {
                            value: value.to_string(),
                        },
                    ));
                }
                match &first_currency {
                    None => first_currency = Some((value.to_string(), row)),
                    Some((first, first_row)) if first != value => {
                        return Err(OffersError::MixedCurrencies {
                            file: self.file.clone(),
                            first_currency: first.clone(),
                            first_row: *first_row,
                            currency: value.to_string(),
                            row,
                        });
                    }
                    Some(_) => {}
                }
            }
            each(OfferRow {
                row,
                instance_type: instance_type.to_string(),
                accelerator_name: accelerator_name.to_string(),
                accelerator_count,
                vcpus,
                memory_gib,
                price,
                spot_price,
                region: region.to_string(),
                zone: zone.map(str::to_string),
            })?;
        }
        if rows == 0 {
            return Err(OffersError::NoRows {
                file: self.file.clone(),
            });
        }
        Ok(Parsed {
            rows,
            currency: first_currency.map(|(c, _)| c),
        })
    }

    /// Reads the rest of the file: true when it holds nothing but ASCII blanks.
    fn only_blanks<R: Read>(&self, reader: &mut csv::Reader<Tracked<R>>) -> bool {
        let mut record = csv::StringRecord::new();
        while let Ok(true) = reader.read_record(&mut record) {}
        let tracked = reader.get_mut();
        let mut rest = [0u8; 8192];
        while let Ok(n) = tracked.read(&mut rest)
            && n > 0
        {}
        tracked.over.is_none() && tracked.only_blanks
    }

    fn header_index(&self, header: &csv::StringRecord) -> Result<Index, OffersError> {
        let fault = |column: &str, problem| OffersError::Header {
            file: self.file.clone(),
            column: column.to_string(),
            problem,
        };
        let mut columns = HashMap::new();
        let mut zone = None;
        let mut currency = None;
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (at, name) in header.iter().enumerate() {
            if seen.insert(name, at).is_some() {
                return Err(fault(name, OffersHeaderProblem::Duplicate));
            }
            if let Some(known) = REQUIRED_COLUMNS.iter().find(|c| **c == name) {
                columns.insert(*known, at);
            } else if name == ZONE_COLUMN {
                zone = Some(at);
            } else if name == CURRENCY_COLUMN {
                currency = Some(at);
            }
        }
        if let Some(missing) = REQUIRED_COLUMNS.iter().find(|c| !columns.contains_key(*c)) {
            return Err(fault(missing, OffersHeaderProblem::Missing));
        }
        Ok(Index {
            columns,
            zone,
            currency,
        })
    }

    /// An empty cell (`None`), or an exact non-negative decimal (see [`crate::field::decimal`]).
    fn decimal(
        &self,
        row: u64,
        column: &str,
        value: &str,
        expected: &'static str,
        positive: bool,
    ) -> Result<Option<Decimal>, OffersError> {
        crate::field::decimal(value, expected, positive)
            .map_err(|p| self.field_error(row, column, p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::Catalogue;

    const FIXTURE: &str = include_str!("../tests/fixtures/skypilot/aws-vms-excerpt.csv");

    const HEADER: &str = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone";

    fn day() -> FileDate {
        FileDate::from_unix_days(20_240)
    }

    fn load(text: &str) -> Result<OffersFile, OffersError> {
        OffersFile::from_reader("offers.csv", day(), text.as_bytes())
    }

    fn message(text: &str) -> String {
        load(text).unwrap_err().to_string()
    }

    /// An independent reading of a price string: its digits as an integer and its decimals.
    fn cents_by_digits(hourly: &str, hours: u128) -> u128 {
        let (whole, fraction) = hourly.split_once('.').unwrap_or((hourly, ""));
        let digits: u128 = format!("{whole}{fraction}").parse().unwrap();
        let divisor = 10u128.pow(fraction.len() as u32);
        let scaled = digits * hours * 100;
        let (q, r) = (scaled / divisor, scaled % divisor);
        q + u128::from(2 * r > divisor || (2 * r == divisor && q % 2 == 1))
    }

    #[test]
    fn dates_are_utc_calendar_days() {
        assert_eq!(FileDate::from_unix_days(0).date, "1970-01-01");
        assert_eq!(FileDate::from_unix_days(-1).date, "1969-12-31");
        assert_eq!(FileDate::from_unix_days(11_016).date, "2000-02-29");
        assert_eq!(FileDate::from_unix_days(19_723).date, "2024-01-01");
        assert_eq!(day().date, "2025-06-01");
        let noon =
            SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(20_240 * 86_400 + 43_200);
        assert_eq!(FileDate::from_system_time(noon), day());
        let before = SystemTime::UNIX_EPOCH - std::time::Duration::from_secs(1);
        assert_eq!(FileDate::from_system_time(before).date, "1969-12-31");
    }

    #[test]
    fn cents_are_exact_and_ties_go_to_even() {
        let d = |s: &str| s.parse::<Decimal>().unwrap();
        assert_eq!(cents_for_hours(d("98.32"), 168), Some(1_651_776));
        // 0.000625 x 72 h = 4.5 cents -> 4; 0.001875 x 72 h = 13.5 cents -> 14.
        assert_eq!(cents_for_hours(d("0.000625"), 72), Some(4));
        assert_eq!(cents_for_hours(d("0.001875"), 72), Some(14));
        assert_eq!(cents_for_hours(d("12.119500"), 168), Some(203_608));
        assert_eq!(cents_for_hours(Decimal::MAX, 720), None);
        for (price, hours) in [("32.7726", 72u64), ("4.662900", 720), ("123.19496", 168)] {
            assert_eq!(
                u128::from(cents_for_hours(d(price), hours).unwrap()),
                cents_by_digits(price, u128::from(hours)),
                "{price}"
            );
        }
    }

    #[test]
    fn numbers_are_read_exactly() {
        let d = |s: &str| crate::field::exact_decimal(s).unwrap().unwrap().to_string();
        assert_eq!(d("98.32"), "98.32");
        assert_eq!(d("12.119500"), "12.119500");
        assert_eq!(d("8.0"), "8.0");
        assert_eq!(d(".5"), "0.5");
        assert_eq!(d("1e-05"), "0.00001");
        assert_eq!(d("1.5E+3"), "1500");
        for bad in ["", ".", "1.2.3", "abc", "1e", "e5", "1,5", "0x10"] {
            assert!(crate::field::exact_decimal(bad).is_none(), "{bad}");
        }
        assert_eq!(crate::field::exact_decimal("1e40"), Some(Err(())));
    }

    #[test]
    fn the_fixture_prices_8_h100_for_7_days() {
        let file = load(FIXTURE).unwrap();
        assert_eq!(file.currency(), "USD");
        assert_eq!(file.rows().len(), 92);
        let section = price(&file, &Mapping::embedded(), &[7]).unwrap();
        assert_eq!(section.date, "2025-06-01");
        let p5 = section
            .offers
            .iter()
            .find(|o| o.instance_type == "p5.48xlarge")
            .unwrap();
        assert_eq!((p5.gpu.as_str(), p5.gpus, p5.hours), ("h100-sxm", 8, 168));
        let od = p5.on_demand.as_ref().unwrap();
        assert_eq!(od.hourly.to_string(), "98.32");
        assert_eq!(u128::from(od.total_cents), cents_by_digits("98.32", 168));
        assert_eq!(
            (od.region.as_str(), od.zone.as_deref(), od.row),
            ("us-east-1", Some("use1-az1"), 58)
        );
        let spot = p5.spot.as_ref().unwrap();
        assert_eq!(
            u128::from(spot.total_cents),
            cents_by_digits("12.119500", 168)
        );
        assert_eq!((spot.region.as_str(), spot.row), ("us-east-2", 64));
        assert_eq!(
            (p5.file.as_str(), p5.date.as_str()),
            ("offers.csv", "2025-06-01")
        );
        // p5e has spot prices only; p4de's spot prices are on its A100-GpuInfo rows.
        let p5e = section
            .offers
            .iter()
            .find(|o| o.instance_type == "p5e.48xlarge")
            .unwrap();
        assert!(p5e.on_demand.is_none());
        assert_eq!(p5e.spot.as_ref().unwrap().hourly.to_string(), "12.536200");
        let p4de = section
            .offers
            .iter()
            .find(|o| o.instance_type == "p4de.24xlarge")
            .unwrap();
        assert_eq!(p4de.gpu, "a100-80gb");
        assert_eq!(
            p4de.spot.as_ref().unwrap().zone.as_deref(),
            Some("use1-az6")
        );
        let p4d = section
            .offers
            .iter()
            .find(|o| o.instance_type == "p4d.24xlarge")
            .unwrap();
        assert_eq!(p4d.gpu, "a100-40gb");
        assert_eq!(section.offers.len(), 5);
        assert_eq!(section.skipped.without_accelerator, 2);
        assert_eq!(
            section.skipped.unmapped,
            vec![Unmapped {
                accelerator_name: "V100-32GB".to_string(),
                rows: 7,
                first_row: 4
            }]
        );
        // Three durations: one offer per instance type and duration, in duration order.
        let all = price(&file, &Mapping::embedded(), &[3, 7, 30]).unwrap();
        assert_eq!(all.offers.len(), 15);
        assert!(all.offers.windows(2).all(|w| w[0].days <= w[1].days));
    }

    #[test]
    fn fit_comes_from_the_package_table() {
        let file = load(FIXTURE).unwrap();
        let mut section = price(&file, &Mapping::embedded(), &[7]).unwrap();
        let catalogue = Catalogue::embedded();
        // 405e9 parameters in 16 bits over 8 GPUs: about 94 GiB per GPU, + 2 GiB.
        let inputs = crate::fit::FitInputs {
            model_bytes: 810_000_000_000,
            reserve_bytes: 2 << 30,
            max_gpus: 8,
            days: Some(7),
            heads: None,
        };
        let options = crate::fit::fit(&catalogue, &inputs);
        attach_fit(&mut section, &options);
        let of = |t: &str| {
            section
                .offers
                .iter()
                .find(|o| o.instance_type == t)
                .unwrap()
        };
        let h200 = of("p5en.48xlarge").fit.clone().unwrap();
        let h100 = of("p5.48xlarge").fit.clone().unwrap();
        assert!(h200.fits && !h100.fits);
        assert_eq!(
            h100.per_gpu_bytes,
            810_000_000_000u128.div_ceil(8) + (2 << 30)
        );
        // Fitting offers first.
        assert!(section.offers[0].fit.as_ref().unwrap().fits);
        // A table without 8-GPU rows leaves fit unknown.
        let mut small = price(&file, &Mapping::embedded(), &[7]).unwrap();
        let one = crate::fit::fit(
            &catalogue,
            &crate::fit::FitInputs {
                max_gpus: 4,
                ..inputs
            },
        );
        attach_fit(&mut small, &one);
        assert!(small.offers.iter().all(|o| o.fit.is_none()));
    }

    #[test]
    fn embedded_mapping_names_catalogue_gpus() {
        let mapping = Mapping::embedded();
        let catalogue = Catalogue::embedded();
        let gpus = catalogue.gpus();
        for row in mapping.rows() {
            assert!(
                gpus.contains(&row.gpu.as_str()),
                "{}: {}",
                row.accelerator_name,
                row.gpu
            );
        }
        for (name, gpu) in [
            ("H100", "h100-sxm"),
            ("h200", "h200"),
            ("B200", "b200"),
            ("A100-80GB", "a100-80gb"),
            ("L4", "l4"),
            ("L40S", "l40s"),
            ("MI300X", "mi300x"),
        ] {
            assert_eq!(mapping.gpu(name), Some(gpu), "{name}");
        }
        assert_eq!(mapping.gpu("V100"), None);
        let dup = "accelerator_name,gpu,note\nH100,h100-sxm,a\nh100,h100-pcie,b\n";
        let err = Mapping::from_reader("m.csv", dup.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("row 3, column `accelerator_name`") && err.contains("row 2"),
            "{err}"
        );
        let bad = "accelerator_name,gpu,note\nH100,H100 SXM,a\n";
        let err = Mapping::from_reader("m.csv", bad.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains("row 2, column `gpu`"), "{err}");
    }

    #[test]
    fn columns_are_found_by_name_and_zones_are_optional() {
        // Lambda's order and columns: no AvailabilityZone, GpuInfo in the middle.
        let text = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\n\
                    gpu_8x_a100,A100,8.0,124.0,1800.0,10.32,us-east-1,\"{'Gpus': []}\",\n";
        let file = load(text).unwrap();
        assert_eq!(file.rows()[0].zone, None);
        assert_eq!(file.rows()[0].spot_price, None);
        let section = price(&file, &Mapping::embedded(), &[3]).unwrap();
        assert_eq!(
            section.offers[0].on_demand.as_ref().unwrap().total_cents,
            74_304
        );
        assert!(section.offers[0].spot.is_none());
        // BOM and CRLF.
        let crlf = format!("\u{feff}{}", FIXTURE.replace('\n', "\r\n"));
        assert_eq!(load(&crlf).unwrap().rows(), load(FIXTURE).unwrap().rows());
    }

    #[test]
    fn rows_that_are_not_instances_are_counted_not_priced() {
        let text = format!(
            "{HEADER}\n\
             ,T4,1.0,,,0.35,0.14,us-central1,us-central1-a\n\
             Standard_NV6ads_A10_v5,A10,0.167,6.0,55.0,0.454,0.1,eastus,\n\
             a1.large,,,2.0,4.0,0.051,0.051000,us-east-1,use1-az2\n\
             g6.xlarge,L4,1.0,4.0,16.0,0.8048,0.3,us-east-1,use1-az1\n"
        );
        let section = price(&load(&text).unwrap(), &Mapping::embedded(), &[3]).unwrap();
        assert_eq!(section.skipped.accelerator_only, 1);
        assert_eq!(section.skipped.fractional_gpus, 1);
        assert_eq!(section.skipped.without_accelerator, 1);
        assert_eq!(section.offers.len(), 1);
        assert_eq!(section.offers[0].gpu, "l4");
    }

    #[test]
    fn mixed_currencies_are_refused_with_both_and_their_rows() {
        let text = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,Currency\n\
                    a,H100,8,1,1,10,,r1,USD\n\
                    b,H100,8,1,1,10,,r1,USD\n\
                    c,H100,8,1,1,9,,r2,EUR\n";
        let err = message(text);
        assert!(err.contains("mixes currencies"), "{err}");
        assert!(err.contains("row 2 is in USD and row 4 in EUR"), "{err}");
        let one = text.replace("EUR", "USD").replace("USD\n", "EUR\n");
        assert_eq!(load(&one).unwrap().currency(), "EUR");
        let bad = text.replace("EUR", "euro");
        assert!(message(&bad).contains("row 4, column `Currency`: `euro` is not a currency code"));
    }

    #[test]
    fn every_fault_names_its_row_and_column() {
        let good = "p5.48xlarge,H100,8.0,192.0,2048.0,98.32,12.1195,us-east-1,use1-az1";
        let with = |row: &str| format!("{HEADER}\n{good}\n{row}\n");
        for (row, says) in [
            (
                "p5,H100,8.0,192.0,2048.0,abc,,r,z",
                "row 3, column `Price`: `abc` is not a number",
            ),
            (
                "p5,H100,8.0,192.0,2048.0,-1.5,,r,z",
                "row 3, column `Price`: `-1.5` is negative",
            ),
            (
                "p5,H100,8.0,192.0,2048.0,0.0,,r,z",
                "row 3, column `Price`: `0.0` is zero",
            ),
            (
                "p5,H100,8.0,192.0,2048.0,1,1..2,r,z",
                "row 3, column `SpotPrice`: `1..2` is not a number",
            ),
            (
                "p5,H100,eight,192.0,2048.0,1,,r,z",
                "row 3, column `AcceleratorCount`: `eight`",
            ),
            (
                "p5,H100,,192.0,2048.0,1,,r,z",
                "row 3, column `AcceleratorCount`: is empty",
            ),
            (
                "p5,H100,0,192.0,2048.0,1,,r,z",
                "row 3, column `AcceleratorCount`: `0` is zero",
            ),
            (
                "p5,H100,1e10,192.0,2048.0,1,,r,z",
                "row 3, column `AcceleratorCount`: `1e10` is too large",
            ),
            (
                "p5,,8,192.0,2048.0,1,,r,z",
                "row 3, column `AcceleratorName`: is empty although AcceleratorCount is `8`",
            ),
            (
                ",,,192.0,2048.0,1,,r,z",
                "row 3, column `InstanceType`: is empty and so is AcceleratorName",
            ),
            (
                "p5,H100,8,many,2048.0,1,,r,z",
                "row 3, column `vCPUs`: `many`",
            ),
            (
                "p5,H100,8,1,-2,1,,r,z",
                "row 3, column `MemoryGiB`: `-2` is negative",
            ),
            ("p5,H100,8,1,2,1,,,z", "row 3, column `Region`: is empty"),
            (
                "p5,H100,8,1,2,1",
                "row 3, column `SpotPrice`: is missing (the row has 6 fields, the header 9)",
            ),
            (
                "p5,H100,8,1,2,1,,r,z,extra",
                "row 3, column `#10`: is extra",
            ),
            (
                "p5,H100,8,1,2,123456789012345678901234567890,,r,z",
                "row 3, column `Price`: `123456789012345678901234567890` is too large",
            ),
        ] {
            let err = message(&with(row));
            assert!(err.starts_with("the offers file offers.csv, "), "{err}");
            assert!(err.contains(says), "{row}: {err}");
        }
        // Header faults are row 1.
        let no_price = HEADER.replace(",Price,", ",Cost,");
        let err = message(&format!("{no_price}\n{good}\n"));
        assert!(
            err.contains("row 1 (header), column `Price`: is missing"),
            "{err}"
        );
        let twice = format!("{HEADER},Region\n{good},r\n");
        assert!(
            message(&twice).contains("row 1 (header), column `Region`: appears more than once")
        );
        // Syntax: invalid UTF-8 on row 3.
        let mut bytes = format!("{HEADER}\n{good}\n").into_bytes();
        bytes.extend_from_slice(b"p5,H\xff100,8,1,2,1,,r,z\n");
        let err = OffersFile::from_reader("offers.csv", day(), &bytes[..])
            .unwrap_err()
            .to_string();
        assert!(err.contains("row 3") && err.contains("UTF-8"), "{err}");
        // Rows are lines of the file, CRLF or not, with a quoted field over two lines.
        let quoted =
            format!("{HEADER}\r\n\"p5\r\nx\",H100,8,1,2,1,,r,z\r\np5,H100,8,1,2,x,,r,z\r\n");
        assert!(
            message(&quoted).contains("row 4, column `Price`"),
            "{}",
            message(&quoted)
        );
        // Empty, header only, too large.
        assert!(matches!(load(""), Err(OffersError::Empty { .. })));
        assert!(matches!(
            load("\u{feff}\r\n"),
            Err(OffersError::Empty { .. })
        ));
        assert!(matches!(
            load(&format!("{HEADER}\n")),
            Err(OffersError::NoRows { .. })
        ));
        let big = std::io::repeat(b'a').take(MAX_OFFERS_BYTES + 1);
        assert!(matches!(
            OffersFile::from_reader("big.csv", day(), big),
            Err(OffersError::TooLarge { .. })
        ));
    }

    #[test]
    fn an_overflowing_total_names_its_row_and_column() {
        let text = format!("{HEADER}\np,H100,8,1,2,99999999999999999999,,r,z\n");
        let err = price(&load(&text).unwrap(), &Mapping::embedded(), &[30])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("row 2, column `Price`") && err.contains("720 hours"),
            "{err}"
        );
    }

    #[test]
    fn from_path_dates_by_modification_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vms.csv");
        std::fs::write(&path, FIXTURE).unwrap();
        let when = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(20_240 * 86_400 + 60);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(when)
            .unwrap();
        let file = OffersFile::from_path(&path).unwrap();
        assert_eq!(file.date().date, "2025-06-01");
        assert_eq!(file.date().source, DATE_SOURCE);
        let err = OffersFile::from_path(&dir.path().join("absent.csv")).unwrap_err();
        assert!(
            err.to_string().starts_with("cannot read the offers file"),
            "{err}"
        );
    }

    /// A file of `types` instance types over `rows` rows, prices drawn from a few values so
    /// that ties (in cents, and in hourly prices) are common, with empty cells, CPU rows and
    /// unmapped accelerators between them.
    fn generated(rows: usize, types: usize, seed: u64) -> String {
        let mut state = seed | 1;
        let mut next = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let gpus = [
            ("H100", 8),
            ("A100-80GB", 4),
            ("L4", 1),
            ("H200", 8),
            ("K80", 2),
        ];
        let mut text = format!("{HEADER}\n");
        for _ in 0..rows {
            let t = next(types as u64);
            let (name, count) = gpus[(t % gpus.len() as u64) as usize];
            let price = |roll: u64| match roll {
                0 => String::new(),
                r => format!("{}.{:04}", r % 7, (r * 37) % 10_000),
            };
            if next(20) == 0 {
                text.push_str(&format!("c{t}.large,,,2,8,0.1,,r{},\n", next(3)));
                continue;
            }
            text.push_str(&format!(
                "i{t}.x,{name},{count},8,64,{},{},r{},z{}\n",
                price(next(9)),
                price(next(9)),
                next(5),
                next(3)
            ));
        }
        text
    }

    #[test]
    fn read_lists_the_first_offers_of_each_duration_as_pricing_everything_does() {
        let dir = tempfile::tempdir().unwrap();
        let catalogue = Catalogue::embedded();
        let options = crate::fit::fit(
            &catalogue,
            &crate::fit::FitInputs {
                model_bytes: 140_000_000_000,
                reserve_bytes: 2 << 30,
                max_gpus: 4,
                days: None,
                heads: None,
            },
        );
        for (seed, rows, types) in [(1, 2_000, 300), (2, 500, 40), (3, 50, 5), (4, 3_000, 1_000)] {
            let text = generated(rows, types, seed);
            let path = dir.path().join("vms.csv");
            std::fs::write(&path, &text).unwrap();
            let mut full = price(&load(&text).unwrap(), &Mapping::embedded(), &[3, 7, 30]).unwrap();
            attach_fit(&mut full, &options);
            for limit in [None, Some(1), Some(3), Some(types / 2 + 1), Some(types * 2)] {
                let read = read(&path, &Mapping::embedded(), &[30, 3, 7], &options, limit).unwrap();
                let mut expected = Vec::new();
                for d in [3, 7, 30] {
                    expected.extend(
                        full.offers
                            .iter()
                            .filter(|o| o.days == d)
                            .take(limit.unwrap_or(usize::MAX))
                            .map(|o| Offer {
                                file: read.file.clone(),
                                date: read.date.clone(),
                                ..o.clone()
                            }),
                    );
                }
                assert_eq!(
                    read.offers.len(),
                    expected.len(),
                    "seed {seed}, limit {limit:?}"
                );
                for (at, (got, want)) in read.offers.iter().zip(&expected).enumerate() {
                    assert!(
                        got == want,
                        "seed {seed}, limit {limit:?}, offer {at}: {got:?} != {want:?}"
                    );
                }
                assert_eq!(read.skipped, full.skipped);
                assert_eq!(read.rows, full.rows);
                assert_eq!(read.instance_types, full.offers.len() as u64 / 3);
                assert_eq!(read.limit, limit);
            }
        }
    }

    #[test]
    fn read_refuses_past_its_limits_with_the_limit_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vms.csv");
        let mapping = Mapping::embedded();
        // One instance type more than the limit: refused at the row that goes past it.
        let mut text = format!("{HEADER}\n");
        for i in 0..=MAX_OFFER_GROUPS {
            text.push_str(&format!("i{i},H100,8,1,2,1.5,,r,\n"));
        }
        std::fs::write(&path, &text).unwrap();
        let err = read(&path, &mapping, &[7], &[], Some(10))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!(
                "row {}: more than 20000 distinct priced instance types",
                MAX_OFFER_GROUPS + 2
            )),
            "{err}"
        );
        // At the limit: read.
        let at_limit: String = text
            .lines()
            .take(MAX_OFFER_GROUPS + 1)
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&path, &at_limit).unwrap();
        let section = read(&path, &mapping, &[7], &[], Some(10)).unwrap();
        assert_eq!(section.instance_types, MAX_OFFER_GROUPS as u64);
        assert_eq!(section.offers.len(), 10);
        // Unmapped names are kept by name too.
        let mut text = format!("{HEADER}\n");
        for i in 0..=MAX_OFFER_GROUPS {
            text.push_str(&format!("i,X{i},8,1,2,1.5,,r,\n"));
        }
        std::fs::write(&path, &text).unwrap();
        let err = read(&path, &mapping, &[7], &[], None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("accelerator names that the mapping does not name"),
            "{err}"
        );
        // A quote left open: refused by its line ends, not read to the end of the file.
        let text = format!(
            "{HEADER}\np,H100,8,1,2,\"1.5{}\n",
            "\n".repeat(MAX_ROW_LINE_ENDS + 10)
        );
        std::fs::write(&path, &text).unwrap();
        let err = read(&path, &mapping, &[7], &[], None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("row 2") || err.contains("line ends"), "{err}");
        assert!(err.contains("more than 1048576 line ends"), "{err}");
        // Over the size limit: the file's size and the limit named.
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(MAX_OFFERS_BYTES + 1).unwrap();
        let err = read(&path, &mapping, &[7], &[], None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!(
                "is {} bytes, larger than 67108864 bytes (64 MiB)",
                MAX_OFFERS_BYTES + 1
            )),
            "{err}"
        );
    }

    #[test]
    fn rows_are_numbered_as_an_editor_shows_them_when_read_as_a_stream() {
        // CRLF line ends, blank lines and a quoted cell over two lines before the fault.
        let text = format!(
            "\u{feff}{}\r\n\r\np,H100,8,1,2,1.5,,r,\"z\r\nz\"\r\n\r\n\r\nq,H100,8,1,2,n/a,,r,z\r\n",
            HEADER
        );
        let err = message(&text);
        assert!(err.contains("row 7, column `Price`"), "{err}");
        let text = text.replace("\r\n", "\n");
        assert!(message(&text).contains("row 7, column `Price`"));
    }
}

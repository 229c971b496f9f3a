//! The CSV rules the catalogue, the datasheet, the offers file and the accelerator mapping share:
//! one reader ([`reader`]: the header read as a row, rows of any width so that a short or long
//! one is named by its reader, every field trimmed), and row numbers as an editor shows them, for
//! every fault a table's reader names.

/// The CSV reader of every table: the header comes back as the first record (each table checks
/// its own names), a row of another width than the header is returned (its reader names the
/// missing or extra field), and spaces around every field are dropped.
pub(crate) fn reader<R: std::io::Read>(from: R) -> csv::Reader<R> {
    csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(from)
}

/// [`line_of`] for records met in file order: it counts the line ends between one record and the
/// next only, so numbering every row of a file is one pass over it, not one pass per row.
#[derive(Debug, Default)]
pub(crate) struct LineCounter {
    /// Bytes already scanned.
    scanned: usize,
    /// Line ends in them.
    line_ends: u64,
}

impl LineCounter {
    pub(crate) fn line_of(&mut self, content: &[u8], position: Option<&csv::Position>) -> u64 {
        let Some(position) = position else {
            return 0;
        };
        let end = record_start(content, position);
        if end < self.scanned {
            // Not in file order (the reader never does this): count from the start.
            return line_of(content, Some(position));
        }
        self.line_ends += content[self.scanned..end]
            .iter()
            .filter(|b| **b == b'\n')
            .count() as u64;
        self.scanned = end;
        self.line_ends + 1
    }
}

/// The offset where a record's text starts, past the line ends the CSV reader's position may
/// point at.
pub(crate) fn record_start(content: &[u8], position: &csv::Position) -> usize {
    let mut end = usize::try_from(position.byte()).map_or(content.len(), |b| b.min(content.len()));
    while end < content.len() && matches!(content[end], b'\r' | b'\n') {
        end += 1;
    }
    end
}

/// The line (from 1) where a record starts. The CSV reader's own position drifts on CRLF files
/// (a record seems to start at the LF of the line before), and a row number must match what an
/// editor shows: so skip line ends at the reported offset, then count the LFs before it.
pub(crate) fn line_of(content: &[u8], position: Option<&csv::Position>) -> u64 {
    let Some(position) = position else {
        return 0;
    };
    let end = record_start(content, position);
    content[..end].iter().filter(|b| **b == b'\n').count() as u64 + 1
}

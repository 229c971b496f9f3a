//! The IteraGPU Lab report: measurement, probe, price, fit and ledger documents and sweep
//! folders turned into one self-contained HTML page.
//!
//! The page needs nothing but a browser: charts are inline SVG drawn with plotters' SVG backend
//! (text stays SVG `<text>`, so no font files are read or embedded), styles are inline, there is
//! no script, and a Content-Security-Policy forbids every fetch, so a page that tried to load
//! anything would say so in the browser console. Every string that comes from a document is
//! escaped: a device name or a file name can never become markup.
//!
//! Runs shown side by side share their axes (time, bytes), so machines compare at a glance.
//!
//! Not here: the documents it reads (`lab::measure`, `lab::probe`, `sweep::summary`), the
//! measurements themselves.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod charts;
mod fit;
mod html;
mod load;
mod units;

pub use fit::{FitDocument, FitRow, RowStanding};
pub use html::{Meta, escape, render};
pub use load::{Inputs, Money, MoneyKind, Probe, ReportError, Run, Standing, Sweep, Verdict, load};

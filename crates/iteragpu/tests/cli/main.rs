//! The CLI end to end: one integration binary, one module per command.

mod measure;

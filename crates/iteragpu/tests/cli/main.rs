//! CLI tests: one integration binary, one module per command.

mod kit;
mod ledger;
mod verify;

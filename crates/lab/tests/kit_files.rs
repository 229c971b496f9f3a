//! The kit's data files and documents, as shipped in the repository.

use std::path::PathBuf;

fn repo_file(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The results grid ships empty: a header and no row, so no result is ever pre-filled.
#[test]
fn results_grid_is_header_only() {
    assert_eq!(
        repo_file("data/resultats-bruts.csv"),
        "run_id,date_utc,protocol_sha256,corpus_id,rental,gpu,days,lots,device_model,device_uuid,\
         driver_version,device_mismatch,measurement_sha256,units_submitted,units_accepted,\
         acceptance_threshold,threshold_met,aggregation,notes\n"
    );
}

/// The quality protocol explains every column of the grid.
#[test]
fn protocol_documents_every_grid_column() {
    let grid = repo_file("data/resultats-bruts.csv");
    let protocol = repo_file("docs/quality-protocol.md");
    for column in grid.trim_end().split(',') {
        assert!(
            protocol.contains(&format!("`{column}`")),
            "{column} is not explained"
        );
    }
}

/// The shipped catalogue file is the embedded one, and it loads.
#[test]
fn shipped_catalogue_is_the_embedded_one() {
    assert_eq!(
        repo_file("data/tarifs-forfaits.csv"),
        rent::catalogue::EMBEDDED_CSV
    );
    let c = rent::catalogue::Catalogue::from_path(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/tarifs-forfaits.csv"),
    )
    .unwrap();
    assert_eq!(c.rows(), rent::catalogue::Catalogue::embedded().rows());
}

#[test]
fn licence_is_mit() {
    let licence = repo_file("LICENSE");
    assert!(licence.starts_with("MIT License"));
    assert!(licence.contains("IteraGPU Lab contributors"));
}

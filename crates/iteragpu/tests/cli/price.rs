//! `iteragpu price`, end to end.

use std::path::Path;

use assert_cmd::cargo::cargo_bin_cmd;
use predicates::prelude::*;

fn price(args: &[&str]) -> assert_cmd::assert::Assert {
    cargo_bin_cmd!("iteragpu").arg("price").args(args).assert()
}

fn json(args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = price(&all).success().get_output().stdout.clone();
    serde_json::from_slice(&out).expect("one JSON document")
}

/// The 7-day B200 lot price, read from the bundled file itself (not from the binary).
fn b200_7_day_cents() -> u64 {
    let csv = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/tarifs-forfaits.csv"),
    )
    .unwrap();
    let line = csv
        .lines()
        .find(|l| l.starts_with("b200,") && l.split(',').nth(5) == Some("7"))
        .unwrap();
    line.split(',').nth(6).unwrap().parse().unwrap()
}

#[test]
fn b200_two_lots_are_four_gpus_at_twice_the_lot_price() {
    let lot = b200_7_day_cents();
    let doc = json(&["--gpu", "b200", "--days", "7", "--lots", "2"]);
    assert_eq!(doc["gpu"], "b200");
    assert_eq!(doc["days"], 7);
    assert_eq!(doc["lots"], 2);
    assert_eq!(doc["gpus_per_lot"], 2);
    assert_eq!(doc["total_gpus"], 4);
    assert_eq!(doc["lot_price_cents"], lot);
    assert_eq!(doc["total_price_cents"], 2 * lot);
    assert_eq!(doc["currency"], "USD");
    assert!(doc["accepted_results"].is_null());
    assert!(doc["unit_price_cents"].is_null());
    assert_eq!(doc["catalogue"], "embedded");
    assert!(doc["source"].as_str().unwrap().contains("example"));
    let mut keys: Vec<&str> = doc
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "accepted_results",
            "catalogue",
            "currency",
            "days",
            "gpu",
            "gpus_per_lot",
            "lot_price_cents",
            "lots",
            "model",
            "source",
            "total_gpus",
            "total_price_cents",
            "unit_price_cents"
        ]
    );

    price(&["--gpu", "b200", "--days", "7", "--lots", "2"])
        .success()
        .stdout(predicate::str::contains(
            "GPUs               4 (2 per lot x 2 lots)",
        ))
        .stdout(predicate::str::contains(format!(
            "({} cents = lot price x 2 lots)",
            2 * lot
        )))
        .stdout(predicate::str::contains("EXAMPLE"))
        .stdout(predicate::str::contains(
            "not availability or a reservation",
        ));
}

#[test]
fn unit_price_is_the_whole_package_over_accepted_results() {
    let lot = b200_7_day_cents();
    let doc = json(&[
        "--gpu",
        "b200",
        "--days",
        "7",
        "--lots",
        "2",
        "--accepted-results",
        "3",
    ]);
    assert_eq!(doc["accepted_results"], 3);
    // Independent: (2 x lot) / 3 to 4 places, half-even, by integer arithmetic.
    let scaled = u128::from(2 * lot) * 10_000;
    let (q, r) = (scaled / 3, scaled % 3);
    let q = if 2 * r > 3 { q + 1 } else { q };
    let want = format!("{}.{:04}", q / 10_000, q % 10_000);
    assert_eq!(doc["unit_price_cents"], want.as_str());
    price(&[
        "--gpu",
        "b200",
        "--days",
        "7",
        "--lots",
        "2",
        "--accepted-results",
        "3",
    ])
    .success()
    .stdout(predicate::str::contains(format!(
        "({want} cents = total / 3, rounded half to even"
    )));
}

#[test]
fn gpu_names_are_case_insensitive() {
    assert_eq!(
        json(&["--gpu", "B200", "--days", "3", "--lots", "1"])["gpu"],
        "b200"
    );
}

#[test]
fn list_shows_all_45_packages() {
    price(&["--list"])
        .success()
        .stdout(predicate::str::contains(
            "45 packages (15 GPU models) from the catalogue embedded",
        ))
        .stdout(predicate::str::contains("EXAMPLES, not real quotes"))
        .stdout(predicate::str::contains("NVIDIA B200"));
    let doc = json(&["--list"]);
    assert_eq!(doc["catalogue"], "embedded");
    let rows = doc["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 45);
    let mut keys: Vec<&str> = rows[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    let mut want = rent::catalogue::COLUMNS.to_vec();
    want.sort_unstable();
    assert_eq!(keys, want);
}

/// The memory columns say their unit: the vendor's GB figure and the MiB a CUDA/ROCm process
/// sees, as the bundled file holds them.
#[test]
fn list_shows_both_memory_columns_with_their_units() {
    let out = price(&["--list"]).success().get_output().stdout.clone();
    let text = String::from_utf8(out).unwrap();
    let header = text.lines().next().unwrap();
    assert!(
        header.contains("GB/GPU") && header.contains("usable MiB") && !header.contains("GiB"),
        "{header}"
    );
    let h100 = text.lines().find(|l| l.starts_with("h100-sxm ")).unwrap();
    let cells: Vec<&str> = h100.split_whitespace().collect();
    assert!(cells.contains(&"80") && cells.contains(&"81106"), "{h100}");
    let doc = json(&["--list"]);
    let csv = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/tarifs-forfaits.csv"),
    )
    .unwrap();
    for (row, line) in doc["rows"]
        .as_array()
        .unwrap()
        .iter()
        .zip(csv.lines().skip(1))
    {
        let fields: Vec<&str> = line.split(',').collect();
        assert_eq!(row["vendor_memory_gb"].to_string(), fields[3]);
        assert_eq!(row["usable_memory_mib"].to_string(), fields[4]);
        assert!(
            row["source"].as_str().unwrap().contains("usable memory: "),
            "{row}"
        );
    }
}

#[test]
fn bad_input_is_a_usage_error_naming_it() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--gpu", "b200", "--days", "5", "--lots", "1"],
            "duration `5` is not an offered package duration; expected 3, 7 or 30",
        ),
        (
            &["--gpu", "b200", "--days", "7", "--lots", "0"],
            "number of lots `0` is zero",
        ),
        (
            &["--gpu", "b200", "--days", "7", "--lots", "-1"],
            "number of lots `-1` is negative",
        ),
        (
            &[
                "--gpu",
                "b200",
                "--days",
                "7",
                "--lots",
                "18446744073709551615",
            ],
            "18446744073709551615 lots of `b200`",
        ),
        (
            &[
                "--gpu",
                "b200",
                "--days",
                "7",
                "--lots",
                "1",
                "--accepted-results",
                "0",
            ],
            "accepted results (distinct accepted useful units) `0` is zero",
        ),
        (
            &[
                "--gpu",
                "b200",
                "--days",
                "7",
                "--lots",
                "1",
                "--accepted-results",
                "-3",
            ],
            "`-3` is negative; expected a positive whole number",
        ),
        (
            &[
                "--gpu",
                "b200",
                "--days",
                "7",
                "--lots",
                "1",
                "--accepted-results",
                "2.5",
            ],
            "`2.5` is not a whole number; expected a positive whole number",
        ),
        (
            &[
                "--gpu",
                "b200",
                "--days",
                "7",
                "--lots",
                "1",
                "--accepted-results",
                "1e3",
            ],
            "`1e3` uses an exponent; expected a positive whole number written in digits only",
        ),
        (
            &["--gpu", "h100", "--days", "7", "--lots", "1"],
            "unknown GPU `h100`; did you mean `h100-sxm`? The catalogue offers: b200, h200",
        ),
        (&["--gpu", "b200"], "--days"),
        (&["--list", "--gpu", "b200"], "cannot be used with"),
    ];
    for (args, says) in cases {
        price(args)
            .code(2)
            .stdout(predicate::str::is_empty())
            .stderr(predicate::str::contains(*says))
            .stderr(predicate::str::contains("panicked").not());
    }
}

const HEADER: &str = "gpu,model,gpus_per_lot,vendor_memory_gb,usable_memory_mib,days,price_cents,currency,snapshot_date,source";

/// A valid one-model catalogue, written with `eol` line ends, optionally after a BOM.
fn small(eol: &str) -> String {
    let mut s = format!("{HEADER}{eol}");
    for (d, cents) in [(3, 30_000), (7, 65_000), (30, 250_000)] {
        s.push_str(&format!(
            "x1,Test GPU,4,64,64000,{d},{cents},USD,2026-11-29,quoted by mail 2026-11-29{eol}"
        ));
    }
    s
}

fn with_catalogue(
    content: &[u8],
    args: &[&str],
) -> (tempfile::TempDir, assert_cmd::assert::Assert) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tariffs.csv");
    std::fs::write(&path, content).unwrap();
    let mut all = vec!["--catalogue", path.to_str().unwrap()];
    all.extend_from_slice(args);
    let assert = price(&all);
    (dir, assert)
}

#[test]
fn a_replacement_catalogue_is_used_and_named() {
    let (dir, a) = with_catalogue(
        small("\n").as_bytes(),
        &["--gpu", "x1", "--days", "7", "--lots", "3", "--json"],
    );
    let doc: serde_json::Value = serde_json::from_slice(&a.success().get_output().stdout).unwrap();
    assert_eq!(doc["total_gpus"], 12);
    assert_eq!(doc["total_price_cents"], 195_000);
    assert_eq!(
        doc["catalogue"],
        dir.path().join("tariffs.csv").to_str().unwrap()
    );
    // A real (non-example) source is not called an example.
    let (_dir, a) = with_catalogue(
        small("\n").as_bytes(),
        &["--gpu", "x1", "--days", "7", "--lots", "3"],
    );
    a.success()
        .stdout(predicate::str::contains("EXAMPLE").not());
}

#[test]
fn bom_and_crlf_catalogues_are_accepted() {
    let mut bom = b"\xEF\xBB\xBF".to_vec();
    bom.extend_from_slice(small("\r\n").as_bytes());
    let (_dir, a) = with_catalogue(&bom, &["--gpu", "x1", "--days", "30", "--lots", "1"]);
    a.success()
        .stdout(predicate::str::contains("(250000 cents)"));
}

#[test]
fn faulty_catalogues_exit_1_naming_file_row_and_column() {
    let good = small("\n");
    let cases: Vec<(String, &str)> = vec![
        (
            good.replace(
                "x1,Test GPU,4,64,64000,30,250000,USD,2026-11-29,quoted by mail 2026-11-29\n",
                "",
            ),
            "rows 2, 3, column `days`: GPU `x1` has no 30-day row",
        ),
        (
            format!("{good}x1,Test GPU,4,64,64000,7,1,USD,2026-11-29,again\n"),
            "row 5, column `days`: duplicates row 3",
        ),
        (
            good.replace(",65000,", ",-65000,"),
            "row 3, column `price_cents`: `-65000` is negative",
        ),
        (
            good.replace(",65000,", ",650.50,"),
            "row 3, column `price_cents`: `650.50` is not a whole number",
        ),
        (
            good.replace(",currency,", ","),
            "row 1 (header), column `currency`: is missing",
        ),
        (String::new(), "is empty"),
        (
            good.replace('\n', "\r\n").replace(",65000,", ",0,"),
            "row 3, column `price_cents`: `0` is zero",
        ),
    ];
    for (content, says) in cases {
        let (dir, a) = with_catalogue(
            content.as_bytes(),
            &["--gpu", "x1", "--days", "7", "--lots", "1"],
        );
        let file = dir.path().join("tariffs.csv");
        a.code(1)
            .stdout(predicate::str::is_empty())
            .stderr(predicate::str::contains(format!(
                "the catalogue {}",
                file.display()
            )))
            .stderr(predicate::str::contains(says));
    }
    // An endless device is refused by what it is, before any byte is read (it once read 3.2 GB).
    price(&["--catalogue", "/dev/zero", "--list"])
        .code(1)
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains(
            "cannot read the catalogue /dev/zero: it is a device, not a regular file; give a regular file",
        ));
    // Not there: refused input, exit 2 (README's exit-code table), as for every command.
    price(&["--catalogue", "/nonexistent/tariffs.csv", "--list"])
        .code(2)
        .stderr(predicate::str::contains(
            "cannot read the catalogue /nonexistent/tariffs.csv",
        ));
}

#[test]
fn help_teaches_with_examples() {
    price(&["--help"])
        .success()
        .stdout(predicate::str::contains(
            "iteragpu price --gpu b200 --days 7 --lots 2",
        ))
        .stdout(predicate::str::contains("not a reservation"));
}

/// A count has one spelling (plain digits), and a unit price of 0 is never printed for a package
/// that costs something: the refusals come first, then the largest count that still prices.
#[test]
fn counts_are_plain_digits_and_a_unit_price_is_never_zero() {
    let base = ["--gpu", "b200", "--days", "7", "--lots", "1"];
    for (value, says) in [
        ("+3", "has a `+` sign"),
        (" 3", "has spaces around the digits"),
        ("3 ", "has spaces around the digits"),
        ("03", "has a leading zero"),
        ("000", "has a leading zero"),
    ] {
        let mut args = base.to_vec();
        args.extend(["--accepted-results", value]);
        price(&args)
            .code(2)
            .stdout(predicate::str::is_empty())
            .stderr(predicate::str::contains(format!(
                "accepted results (distinct accepted useful units) `{value}` {says}"
            )));
        let lots = ["--gpu", "b200", "--days", "7", "--lots", value];
        price(&lots)
            .code(2)
            .stderr(predicate::str::contains(format!("lots `{value}` {says}")));
    }
    let total = b200_7_day_cents();
    // 2^64 - 1 results: the price of one would round to 0.0000 cents.
    let mut args = base.to_vec();
    args.extend(["--accepted-results", "18446744073709551615", "--json"]);
    let most = 2 * u128::from(total) * 10_000 - 1;
    let out = price(&args).code(2).stdout(predicate::str::is_empty());
    let err: serde_json::Value =
        serde_json::from_slice(out.get_output().stderr.trim_ascii_end()).unwrap();
    let err = err["error"].as_str().unwrap();
    assert!(err.contains("rounds to 0"), "{err}");
    assert!(
        err.contains(&format!("at most {most} accepted results")),
        "{err}"
    );
    // The largest count it names still gives a price above 0.
    let most = most.to_string();
    let mut args = base.to_vec();
    args.extend(["--accepted-results", &most]);
    let doc = json(&args);
    assert_eq!(doc["unit_price_cents"], "0.0001", "{doc}");
}

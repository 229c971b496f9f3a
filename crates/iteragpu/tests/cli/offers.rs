//! `iteragpu fit --offers FILE`, end to end, on an excerpt of SkyPilot's AWS catalogue
//! (`crates/rent/tests/fixtures/skypilot/`, with its source in the README there). Expected cents
//! are computed here from the fixture's own cells, not from the binary.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use assert_cmd::cargo::cargo_bin_cmd;
use assert_cmd::prelude::*;
use predicates::prelude::*;
use serde_json::Value;

/// 2025-06-01 00:01 UTC.
const DAY_SECONDS: u64 = 20_240 * 86_400 + 60;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../rent/tests/fixtures/skypilot/aws-vms-excerpt.csv")
}

/// `text` written as `vms.csv` in a new folder, modified on 2025-06-01.
fn dated(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("vms.csv");
    std::fs::write(&path, text).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(DAY_SECONDS))
        .unwrap();
    path
}

fn fit(args: &[&str]) -> assert_cmd::assert::Assert {
    let mut all = vec!["fit", "--parameters", "70B", "--bits", "16", "--days", "7"];
    all.extend_from_slice(args);
    cargo_bin_cmd!("iteragpu").args(&all).assert()
}

fn fit_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = fit(&all).success().get_output().stdout.clone();
    serde_json::from_slice(&out).expect("one JSON document")
}

/// A decimal cell as (digits, decimals): `98.32` -> (9832, 2).
fn digits(cell: &str) -> (u128, u32) {
    let (whole, fraction) = cell.split_once('.').unwrap_or((cell, ""));
    (
        format!("{whole}{fraction}").parse().unwrap(),
        fraction.len() as u32,
    )
}

fn less(a: &str, b: &str) -> bool {
    let ((x, sx), (y, sy)) = (digits(a), digits(b));
    x * 10u128.pow(sy) < y * 10u128.pow(sx)
}

/// `cell` per hour x `hours`, in cents, half to even.
fn cents(cell: &str, hours: u128) -> u64 {
    let (d, scale) = digits(cell);
    let divisor = 10u128.pow(scale);
    let scaled = d * hours * 100;
    let (q, r) = (scaled / divisor, scaled % divisor);
    u64::try_from(q + u128::from(2 * r > divisor || (2 * r == divisor && q % 2 == 1))).unwrap()
}

/// The first row (line of the file) of `instance` with the smallest non-empty `column`, and
/// that cell.
fn cheapest(instance: &str, column: &str) -> (u64, String) {
    let mut reader = csv::Reader::from_path(fixture()).unwrap();
    let headers = reader.headers().unwrap().clone();
    let at = |name: &str| headers.iter().position(|h| h == name).unwrap();
    let (kind, price) = (at("InstanceType"), at(column));
    let mut best: Option<(u64, String)> = None;
    for record in reader.records() {
        let record = record.unwrap();
        let cell = &record[price];
        if record[kind] != *instance || cell.is_empty() {
            continue;
        }
        if best.as_ref().is_none_or(|(_, b)| less(cell, b)) {
            best = Some((record.position().unwrap().line(), cell.to_string()));
        }
    }
    best.unwrap()
}

#[test]
fn seven_days_of_8_h100_on_demand_and_spot_are_priced_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let file = dated(dir.path(), &std::fs::read_to_string(fixture()).unwrap());
    let doc = fit_json(&["--offers", file.to_str().unwrap()]);
    let section = &doc["offers"];
    assert_eq!(section["file"], file.to_str().unwrap());
    assert_eq!(section["date"], "2025-06-01");
    assert_eq!(section["currency"], "USD");
    let offers = section["offers"].as_array().unwrap();
    let p5 = offers
        .iter()
        .find(|o| o["instance_type"] == "p5.48xlarge")
        .expect("p5.48xlarge is offered");
    assert_eq!(p5["gpu"], "h100-sxm");
    assert_eq!(p5["gpus"], 8);
    assert_eq!(p5["days"], 7);
    assert_eq!(p5["hours"], 168);
    let (row, hourly) = cheapest("p5.48xlarge", "Price");
    assert_eq!(hourly, "98.32");
    assert_eq!(p5["on_demand"]["total_cents"], cents(&hourly, 7 * 24));
    assert_eq!(p5["on_demand"]["hourly"], hourly);
    assert_eq!(p5["on_demand"]["row"], row);
    assert_eq!(p5["on_demand"]["region"], "us-east-1");
    let (row, hourly) = cheapest("p5.48xlarge", "SpotPrice");
    assert_eq!(p5["spot"]["total_cents"], cents(&hourly, 7 * 24));
    assert_eq!(p5["spot"]["row"], row);
    // 70B in bfloat16 over 8 H100: the package table's row says it fits.
    assert_eq!(p5["fit"]["fits"], true);
    let package = doc["options"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["gpu"] == "h100-sxm" && o["total_gpus"] == 8)
        .unwrap();
    assert_eq!(p5["fit"]["per_gpu_bytes"], package["per_gpu_bytes"]);
    // Every offer names its file and date; p5e has no on-demand price, only spot.
    for o in offers {
        assert_eq!(o["file"], file.to_str().unwrap());
        assert_eq!(o["date"], "2025-06-01");
        assert_eq!(o["currency"], "USD");
    }
    let p5e = offers
        .iter()
        .find(|o| o["instance_type"] == "p5e.48xlarge")
        .unwrap();
    assert!(p5e["on_demand"].is_null());
    let (_, spot) = cheapest("p5e.48xlarge", "SpotPrice");
    assert_eq!(p5e["spot"]["total_cents"], cents(&spot, 168));
    assert_eq!(
        section["skipped"]["unmapped"][0]["accelerator_name"],
        "V100-32GB"
    );
    assert_eq!(section["skipped"]["without_accelerator"], 2);
}

#[test]
fn text_lists_offers_after_the_packages_with_file_and_date() {
    let dir = tempfile::tempdir().unwrap();
    let file = dated(dir.path(), &std::fs::read_to_string(fixture()).unwrap());
    let out = fit(&["--offers", file.to_str().unwrap()])
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    let packages = text
        .find("packages fit")
        .or_else(|| text.find("None of the"))
        .unwrap();
    let offers = text.find("Offers from").expect("an offers section");
    assert!(packages < offers, "{text}");
    assert!(
        text.contains(&format!("Offers from {}, dated 2025-06-01", file.display())),
        "{text}"
    );
    let p5 = text.lines().find(|l| l.starts_with("p5.48xlarge")).unwrap();
    let hourly = cheapest("p5.48xlarge", "Price").1;
    let total = cents(&hourly, 168);
    assert!(
        p5.contains(&format!("USD {}.{:02}", total / 100, total % 100)),
        "{p5}"
    );
    assert!(p5.contains("vms.csv 2025-06-01"), "{p5}");
    let p5e = text
        .lines()
        .find(|l| l.starts_with("p5e.48xlarge"))
        .unwrap();
    assert!(p5e.contains(" none "), "{p5e}");
    assert!(text.contains("V100-32GB (7 rows from row 4)"), "{text}");
}

#[test]
fn a_file_that_mixes_currencies_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let original = std::fs::read_to_string(fixture()).unwrap();
    let mut text = String::new();
    for (i, line) in original.lines().enumerate() {
        let currency = match i {
            0 => "Currency",
            // Line 58 is the first p5.48xlarge row at 98.32.
            57 => "EUR",
            _ => "USD",
        };
        text.push_str(&format!("{line},{currency}\n"));
    }
    let file = dated(dir.path(), &text);
    fit(&["--offers", file.to_str().unwrap()])
        .code(1)
        .stderr(predicate::str::contains(
            "mixes currencies in column `Currency`: row 2 is in USD and row 58 in EUR",
        ))
        .stdout("");
    // One currency throughout: accepted, and said.
    let file = dated(dir.path(), &text.replace(",EUR\n", ",USD\n"));
    let doc = fit_json(&["--offers", file.to_str().unwrap()]);
    assert_eq!(doc["offers"]["currency"], "USD");
    assert!(
        doc["offers"]["currency_source"]
            .as_str()
            .unwrap()
            .contains("Currency column")
    );
}

#[test]
fn every_fault_of_a_bad_offers_file_names_its_row_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let original = std::fs::read_to_string(fixture()).unwrap();
    let edit = |line: usize, from: &str, to: &str| -> String {
        original
            .lines()
            .enumerate()
            .map(|(i, l)| {
                if i + 1 == line {
                    l.replacen(from, to, 1) + "\n"
                } else {
                    format!("{l}\n")
                }
            })
            .collect()
    };
    for (text, says) in [
        (
            edit(58, ",98.32,", ",n/a,"),
            "row 58, column `Price`: `n/a` is not a number",
        ),
        (
            edit(64, ",12.119500,", ",-12.1195,"),
            "row 64, column `SpotPrice`: `-12.1195` is negative",
        ),
        (
            edit(58, ",H100,8.0,", ",H100,,"),
            "row 58, column `AcceleratorCount`: is empty",
        ),
        (
            edit(58, ",us-east-1,", ",,"),
            "row 58, column `Region`: is empty",
        ),
        (
            edit(1, ",Price,", ",OnDemandPrice,"),
            "row 1 (header), column `Price`: is missing",
        ),
    ] {
        let file = dated(dir.path(), &text);
        fit(&["--offers", file.to_str().unwrap()])
            .code(1)
            .stderr(predicate::str::contains(format!(
                "the offers file {}, {says}",
                file.display()
            )));
    }
    let absent = dir.path().join("absent.csv");
    // Not there: refused input, exit 2 (README's exit-code table), as for every command.
    fit(&["--offers", absent.to_str().unwrap(), "--json"])
        .code(2)
        .stderr(predicate::str::contains("cannot read the offers file"));
}

#[test]
fn without_offers_the_json_has_a_null_offers_key_and_nothing_else_changes() {
    let dir = tempfile::tempdir().unwrap();
    let file = dated(dir.path(), &std::fs::read_to_string(fixture()).unwrap());
    let mut plain = fit_json(&[]);
    let mut with = fit_json(&["--offers", file.to_str().unwrap()]);
    assert!(plain.as_object().unwrap().contains_key("offers"));
    assert!(plain["offers"].is_null());
    assert!(with["offers"].is_object());
    plain.as_object_mut().unwrap().remove("offers");
    with.as_object_mut().unwrap().remove("offers");
    assert_eq!(plain, with);
    // The offers key comes last: the document's own keys keep their order.
    let out = fit(&["--json"]).success().get_output().stdout.clone();
    let text = String::from_utf8(out).unwrap();
    assert!(text.trim_end().ends_with("\"offers\": null\n}"), "{text}");
}

/// `iteragpu fit ARGS` under an address-space limit of `mib` MiB (`ulimit -v`, which counts
/// every mapping, so it bounds the peak RSS too).
fn fit_within(mib: u64, args: &[&str]) -> assert_cmd::assert::Assert {
    let bin = assert_cmd::cargo::cargo_bin("iteragpu");
    let mut all = vec!["fit", "--parameters", "70B", "--bits", "16", "--days", "7"];
    all.extend_from_slice(args);
    std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {} && exec \"$0\" \"$@\"", mib * 1024))
        .arg(bin)
        .args(&all)
        .assert()
}

/// Issue 32, item 4: 10^6 rows (2,000 instance types over regions) are priced within 200 MiB of
/// address space, and `--limit 10` lists the 10 cheapest of the duration, computed here from the
/// generated cells. The reader held every row before (about 4 GB for such a file).
#[test]
fn a_million_rows_are_priced_in_bounded_memory_and_the_limit_keeps_the_cheapest() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vms.csv");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    writeln!(
        out,
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone"
    )
    .unwrap();
    let types = 2_000u64;
    // Cheapest hourly price of each instance type, in hundredths.
    let mut cheapest = vec![u64::MAX; types as usize];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..1_000_000u64 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let t = i % types;
        let hundredths = 200 + state % 9_000;
        cheapest[t as usize] = cheapest[t as usize].min(hundredths);
        writeln!(
            out,
            "i{t}.xl,H100,8.0,192.0,2048.0,{}.{:02},,r{},z{}",
            hundredths / 100,
            hundredths % 100,
            i % 31,
            i % 3
        )
        .unwrap();
    }
    out.into_inner().unwrap().sync_all().unwrap();
    let output = fit_within(
        200,
        &[
            "--offers",
            path.to_str().unwrap(),
            "--limit",
            "10",
            "--json",
        ],
    )
    .success()
    .get_output()
    .stdout
    .clone();
    let doc: Value = serde_json::from_slice(&output).unwrap();
    let section = &doc["offers"];
    assert_eq!(section["rows"], 1_000_000);
    assert_eq!(section["instance_types"], types);
    assert_eq!(section["limit"], 10);
    // Every type is 8 H100 (the same fit): cheapest on demand first (168 hours, so distinct
    // hundredths stay distinct cents), then the instance type's name.
    let mut expected: Vec<(u64, String)> = cheapest
        .iter()
        .enumerate()
        .map(|(t, h)| (*h, format!("i{t}.xl")))
        .collect();
    expected.sort();
    let listed: Vec<(u64, String)> = section["offers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["on_demand"]["total_cents"].as_u64().unwrap() / 168,
                o["instance_type"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(listed, expected[..10].to_vec());
}

/// Issue 32, item 4: what would make the reader's memory grow with the file is refused with the
/// limit named: a file over 64 MiB (with its size), and more than 20,000 instance types.
#[test]
fn files_past_the_reader_limits_are_refused_with_the_limit_named() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.csv");
    let file = std::fs::File::create(&big).unwrap();
    file.set_len(64 * 1024 * 1024 + 1).unwrap();
    fit_within(200, &["--offers", big.to_str().unwrap()])
        .code(1)
        .stderr(predicate::str::contains(format!(
            "the offers file {} is 67108865 bytes, larger than 67108864 bytes (64 MiB), the largest accepted",
            big.display()
        )));
    let mut text = String::from(
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n",
    );
    for i in 0..30_000 {
        text.push_str(&format!("i{i},H100,8.0,1.0,2.0,1.5,,r,\n"));
    }
    let many = dated(dir.path(), &text);
    fit_within(200, &["--offers", many.to_str().unwrap(), "--limit", "10"])
        .code(1)
        .stderr(predicate::str::contains(format!(
            "the offers file {}, row 20002: more than 20000 distinct priced instance types",
            many.display()
        )))
        .stdout("");
}

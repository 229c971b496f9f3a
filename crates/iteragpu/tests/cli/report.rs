//! `iteragpu report` end to end: documents and a sweep of the CPU reference device become one
//! self-contained page, which a real browser (headless Chromium) renders without a console error,
//! with every chart drawn.

use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value;

fn iteragpu() -> Command {
    Command::cargo_bin("iteragpu").unwrap()
}

/// Real runs of the CPU reference device: a three-point sweep, two small single measurements
/// and one about thirty times larger in memory.
fn runs(dir: &Path) {
    iteragpu()
        .current_dir(dir)
        .args(["sweep", "--device", "cpu", "--batch", "1", "--context", "8"])
        .args(["--width", "16..64:x2", "--warmup", "1", "--repeats", "2"])
        .args(["--output-dir", "sweep"])
        .assert()
        .success();
    for (file, dtype, width) in [
        ("a.json", "float32", "32"),
        ("b.json", "bfloat16", "64"),
        ("c.json", "float32", "1024"),
    ] {
        iteragpu()
            .current_dir(dir)
            .args([
                "measure",
                "--device",
                "cpu",
                "--batch",
                "2",
                "--context",
                "8",
            ])
            .args(["--width", width, "--dtype", dtype, "--repeats", "3"])
            .args(["--output", file])
            .assert()
            .success();
    }
    // The host-side probe of the CPU reference device.
    iteragpu()
        .current_dir(dir)
        .args([
            "probe",
            "--device",
            "cpu",
            "--seconds",
            "1",
            "--copy-bytes",
            "1MiB",
        ])
        .args(["--output", "p.json"])
        .assert()
        .success();
}

#[test]
fn the_report_is_one_self_contained_page_with_every_chart() {
    let dir = tempfile::tempdir().unwrap();
    runs(dir.path());
    let out = iteragpu()
        .current_dir(dir.path())
        .args([
            "report", "sweep", "a.json", "b.json", "c.json", "--output", "r.html", "--json",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let written: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        (&written["runs"], &written["sweeps"], &written["charts"]),
        (&Value::from(3), &Value::from(1), &Value::from(9))
    );
    let html = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
    // Each chart drawn twice: for a frame of 500 px or more, and narrow for a phone.
    assert_eq!(html.matches("<svg class=\"wide\"").count(), 9);
    assert_eq!(html.matches("<svg class=\"narrow\"").count(), 9);
    // The two small runs share a memory scale; the large one has its own.
    assert!(html.contains("Same memory scale as b.json."));
    assert!(html.contains("Same memory scale as a.json."));
    assert_eq!(html.matches("own memory scale").count(), 1);
    for title in [
        "Warm forward time against width",
        "Peak memory against width",
        "Achieved throughput against width",
        "Time per phase: wall clock vs device",
        "Memory per phase: allocated and reserved",
        "bytes (MiB, linear)",
        "time (ms, log scale)",
        "allocated peak",
        "Environment",
    ] {
        assert!(html.contains(title), "missing {title:?}");
    }
    // Self-contained: nothing is loaded from anywhere.
    for external in [
        "<script", "<link", "src=", "@import", "url(", "http://", "https://",
    ] {
        let hits: Vec<_> = html
            .match_indices(external)
            .filter(|(i, _)| !html[*i..].starts_with("http://www.w3.org/2000/svg"))
            .collect();
        assert!(hits.is_empty(), "the page refers to {external}");
    }
}

#[test]
fn text_from_documents_is_escaped() {
    let dir = tempfile::tempdir().unwrap();
    runs(dir.path());
    let mut doc: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("a.json")).unwrap()).unwrap();
    let evil = "<script>alert('x')</script>&<b>";
    doc["environment"]["details"]["cpu_model"] = Value::from(evil);
    doc["started_utc"] = Value::from(evil);
    let name = "<img src=x onerror=alert(1)>.json";
    std::fs::write(dir.path().join(name), serde_json::to_vec(&doc).unwrap()).unwrap();
    iteragpu()
        .current_dir(dir.path())
        .args(["report", name, "--output", "r.html"])
        .assert()
        .success();
    let html = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
    assert!(!html.contains("<script") && !html.contains("<img") && !html.contains("<b>"));
    assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&lt;b&gt;"));
    assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;.json"));
}

/// Issue 27: a probe document is JSON, and nothing in JSON stops a figure of 1e308; its table
/// cell stays short (scientific notation) instead of a 309-digit number that breaks the table.
#[test]
fn an_absurd_probe_figure_stays_short_in_the_table() {
    let dir = tempfile::tempdir().unwrap();
    iteragpu()
        .current_dir(dir.path())
        .args([
            "probe",
            "--device",
            "cpu",
            "--seconds",
            "0.2",
            "--copy-bytes",
            "1MiB",
        ])
        .args(["--output", "p.json"])
        .assert()
        .success();
    let mut doc: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("p.json")).unwrap()).unwrap();
    doc["devices"][0]["copies"][0]["gb_per_s"] = serde_json::json!(1e308);
    std::fs::write(
        dir.path().join("huge.json"),
        serde_json::to_vec(&doc).unwrap(),
    )
    .unwrap();
    iteragpu()
        .current_dir(dir.path())
        .args(["report", "huge.json", "--output", "r.html"])
        .assert()
        .success();
    let html = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
    assert!(
        html.contains(">1.000e308 GB/s<"),
        "no short figure in the table"
    );
    assert!(
        !html.contains(&"0".repeat(40)),
        "a long run of digits is in the page"
    );
}

#[test]
fn refusals() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("r.html"), "precious").unwrap();
    std::fs::write(
        dir.path().join("x.json"),
        "{\"schema\": \"iteragpu.environment/1\"}",
    )
    .unwrap();
    iteragpu()
        .current_dir(dir.path())
        .args(["report", "x.json", "--output", "r.html"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("r.html already exists"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("r.html")).unwrap(),
        "precious"
    );
    iteragpu()
        .current_dir(dir.path())
        .args(["report", "nope", "--output", "new.html"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("nope does not exist"));
    iteragpu()
        .current_dir(dir.path())
        .args(["report", "x.json", "--output", "new.html"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "x.json is not a measurement document (its schema is \"iteragpu.environment/1\"); give files written by `iteragpu measure`, `probe`, or `price`, `fit` and `cost` with --json",
        ));
    // A document without a schema is read only when it has the keys of `price`, `fit` or
    // `cost` (--json); anything else is refused, naming what it would have to be.
    std::fs::write(
        dir.path().join("y.json"),
        "{\"gpu\": \"h100\", \"total_price_cents\": \"a lot\"}",
    )
    .unwrap();
    iteragpu()
        .current_dir(dir.path())
        .args(["report", "y.json", "--output", "new.html"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "y.json is not a measurement document (it has no schema, and it is not the output of `iteragpu price --json`, `fit --json` or `cost --json`)",
        ));
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    iteragpu()
        .current_dir(dir.path())
        .args(["report", "empty", "--output", "new.html"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("holds no summary.csv"));
    assert!(!dir.path().join("new.html").exists());
}

#[test]
fn documents_each_within_their_limit_but_too_many_together_are_refused() {
    // Five valid measurement documents of 15 MiB each (a real run padded with trailing white
    // space, which JSON allows): each is under the 16 MiB document limit, together they pass
    // the 64 MiB a report reads in all.
    let dir = tempfile::tempdir().unwrap();
    iteragpu()
        .current_dir(dir.path())
        .args([
            "measure",
            "--device",
            "cpu",
            "--batch",
            "1",
            "--context",
            "4",
        ])
        .args(["--width", "16", "--repeats", "1", "--output", "m.json"])
        .assert()
        .success();
    let mut text = std::fs::read(dir.path().join("m.json")).unwrap();
    text.resize(15 << 20, b' ');
    let names: Vec<String> = (1..=5).map(|i| format!("m{i}.json")).collect();
    for name in &names {
        std::fs::write(dir.path().join(name), &text).unwrap();
    }
    // Four of them (60 MiB) make a page; five are refused before the page is written.
    iteragpu()
        .current_dir(dir.path())
        .arg("report")
        .args(&names[..4])
        .args(["--output", "four.html"])
        .assert()
        .success();
    iteragpu()
        .current_dir(dir.path())
        .arg("report")
        .args(&names)
        .args(["--output", "five.html"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "the inputs add up to more than 64 MiB, the most one report reads; make several reports",
        ));
    assert!(!dir.path().join("five.html").exists());
}

/// Chromium on this machine: `CHROMIUM` names it, else the usual names on the PATH.
fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|d| {
            ["chromium", "chromium-browser", "google-chrome"]
                .into_iter()
                .map(move |n| d.join(n))
        })
        .find(|p| p.is_file())
}

/// Runs Chromium headless on a page and returns (stdout, stderr); killed after two minutes.
fn headless(browser: &Path, profile: &Path, extra: &[String], page: &Path) -> (String, String) {
    let mut child = Process::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chromium starts");
    // Read the pipes on threads so a chatty browser never blocks on a full pipe.
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut so, &mut s).ok();
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut se, &mut s).ok();
        s
    });
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(120) {
            child.kill().ok();
            child.wait().ok();
            panic!("chromium did not finish within two minutes");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (out.join().unwrap(), err.join().unwrap())
}

/// Added to a copy of the page (never to the report itself, which has no script): records
/// every error the page raises (script errors, failed loads, Content-Security-Policy
/// violations, console.error) and, once loaded, measures every chart, then writes the results
/// into the DOM for `--dump-dom`.
const PROBE: &str = r#"<script>
window.__errors = [];
const __error = console.error;
console.error = (...a) => { window.__errors.push('console.error: ' + a.join(' ')); __error(...a); };
window.addEventListener('error', e => window.__errors.push('error: ' + (e.message || (e.target && (e.target.src || e.target.href)) || 'a resource failed')), true);
document.addEventListener('securitypolicyviolation', e => window.__errors.push('csp: ' + e.violatedDirective + ' ' + e.blockedURI));
window.addEventListener('load', () => {
  const charts = [...document.querySelectorAll('figure.chart')].map(f => {
    const svg = f.querySelector('svg');
    if (!svg) return { kind: f.dataset.chart, svg: false };
    const box = svg.getBoundingClientRect();
    const drawn = svg.getBBox();
    const frame = f.getBoundingClientRect();
    return {
      kind: f.dataset.chart, svg: true, width: box.width, height: box.height,
      left: box.left, right: box.right, frame_right: frame.right,
      scroll_overflow: f.scrollWidth - f.clientWidth,
      drawn_width: drawn.width, drawn_height: drawn.height,
      marks: svg.querySelectorAll('rect, polyline, path, circle, line').length,
      texts: [...svg.querySelectorAll('text')].filter(t => t.getComputedTextLength() > 0).map(t => t.textContent.trim()),
    };
  });
  const pre = document.createElement('pre');
  pre.id = 'iteragpu-probe';
  const page = { viewport: window.innerWidth, scroll_width: document.documentElement.scrollWidth };
  pre.textContent = JSON.stringify({ charts, page, errors: window.__errors });
  document.body.appendChild(pre);
});
</script>"#;

/// The width of a common laptop screen: the page must fit it without a horizontal scrollbar.
const SCREEN_WIDTH: u32 = 1280;

#[test]
fn chromium_renders_every_chart_without_a_console_error() {
    let Some(browser) = chromium() else {
        if std::env::var_os("CI").is_some() {
            panic!("CI is set but no Chromium was found: .ci/run installs Debian's `chromium`");
        }
        eprintln!(
            "SKIPPED chromium_renders_every_chart_without_a_console_error: no chromium on the \
             PATH (apt-get install chromium, or set CHROMIUM); CI always runs it"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    runs(dir.path());
    iteragpu()
        .current_dir(dir.path())
        .args([
            "report", "sweep", "a.json", "b.json", "c.json", "p.json", "--output", "r.html",
        ])
        .assert()
        .success();
    let html = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
    // The probe needs inline script, which the page's policy otherwise forbids; nothing else
    // about the policy changes.
    let csp = "content=\"default-src 'none';";
    assert!(html.contains(csp));
    let probed = html
        .replacen(
            csp,
            "content=\"default-src 'none'; script-src 'unsafe-inline';",
            1,
        )
        .replacen("<style>", &format!("{PROBE}\n<style>"), 1);
    let page = dir.path().join("probed.html");
    std::fs::write(&page, probed).unwrap();

    let profile = tempfile::tempdir().unwrap();
    let (dom, log) = headless(
        &browser,
        profile.path(),
        &[
            "--dump-dom".into(),
            "--virtual-time-budget=5000".into(),
            format!("--window-size={SCREEN_WIDTH},2400"),
        ],
        &page,
    );
    let start = dom
        .find("<pre id=\"iteragpu-probe\">")
        .unwrap_or_else(|| panic!("the probe did not run; browser log:\n{log}"))
        + "<pre id=\"iteragpu-probe\">".len();
    let end = start + dom[start..].find("</pre>").unwrap();
    let text = dom[start..end]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    let probe: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        probe["errors"],
        Value::Array(vec![]),
        "page errors: {probe}"
    );
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "console messages: {console:#?}");

    let charts = probe["charts"].as_array().unwrap();
    let kinds: Vec<&str> = charts.iter().map(|c| c["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "sweep-time",
            "sweep-memory",
            "sweep-flops",
            "phase-time",
            "phase-memory",
            "phase-time",
            "phase-memory",
            "phase-time",
            "phase-memory",
            "probe-copies"
        ]
    );
    // At 1280 px no chart is wider than its frame or the page: the page never scrolls sideways.
    let page = &probe["page"];
    assert_eq!(
        page["viewport"].as_f64().unwrap(),
        SCREEN_WIDTH as f64,
        "{page}"
    );
    assert!(
        page["scroll_width"].as_f64().unwrap() <= SCREEN_WIDTH as f64,
        "the page scrolls sideways at {SCREEN_WIDTH} px: {page}"
    );
    for c in charts {
        assert_eq!(c["svg"], true, "{c}");
        let px = |k: &str| c[k].as_f64().unwrap();
        assert!(px("left") >= 0.0, "a chart starts left of the page: {c}");
        assert!(
            px("right") <= px("frame_right") + 0.5,
            "a chart overflows its frame: {c}"
        );
        assert!(
            px("right") <= SCREEN_WIDTH as f64,
            "a chart overflows the page: {c}"
        );
        assert!(px("scroll_overflow") <= 0.0, "a chart's frame scrolls: {c}");
        assert!(c["width"].as_f64().unwrap() >= 500.0, "{c}");
        assert!(c["height"].as_f64().unwrap() >= 300.0, "{c}");
        assert!(c["drawn_width"].as_f64().unwrap() >= 400.0, "{c}");
        // Axes, grid, bars or curves and markers: far more than an empty frame.
        assert!(c["marks"].as_u64().unwrap() >= 20, "{c}");
        let texts: Vec<&str> = c["texts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        assert!(
            texts.len() >= 8,
            "title, axis labels, ticks, legend: {texts:?}"
        );
    }
    let sweep_time = &charts[0]["texts"];
    // 16 to 64 is under a decade: a linear axis, which its title says.
    for label in ["16", "32", "64", "width (linear)", "sweep wall"] {
        assert!(
            sweep_time.as_array().unwrap().iter().any(|t| t == label),
            "{label:?} not in {sweep_time}"
        );
    }

    // And a picture of it, kept with the test outputs.
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-screenshot.png");
    std::fs::remove_file(&shot).ok();
    let profile = tempfile::tempdir().unwrap();
    headless(
        &browser,
        profile.path(),
        &[
            format!("--screenshot={}", shot.display()),
            format!("--window-size={SCREEN_WIDTH},2400"),
        ],
        &dir.path().join("r.html"),
    );
    let png = std::fs::read(&shot).expect("chromium wrote the screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 20_000);
    eprintln!("screenshot: {}", shot.display());
}

/// Per-GPU bars against the datasheet line: a stub H200 pair's probe (whose second GPU is four
/// times slower) beside a measurement, and the CPU probe labelled as host figures only.
#[test]
fn probe_documents_are_drawn_beside_measurements() {
    use crate::stubs::{StubDir, iteragpu as with_stubs};
    let dir = tempfile::tempdir().unwrap();
    runs(dir.path());
    let libs = StubDir::new();
    libs.driver(&["FULL", "WITH_V2", "MEMORY_BUDGET=(1UL<<40)"])
        .nvml()
        .cublas_with("", &["RECORD"], &["RECORD"]);
    with_stubs(libs.path())
        .current_dir(dir.path())
        .env("STUB_DEVICE_COUNT", "2")
        .env("STUB_NAMES", "NVIDIA H200,NVIDIA H200")
        .env("STUB_EVENT_MS", "1.0,4.0")
        .env("STUB_NVML_PCIE_MAX", "5x16")
        .args(["probe", "--device", "all", "--seconds", "2"])
        .args([
            "--copy-bytes",
            "1MiB",
            "--gemm-size",
            "64",
            "--output",
            "lot.json",
        ])
        .assert()
        .success();
    let lot: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("lot.json")).unwrap()).unwrap();
    let out = iteragpu()
        .current_dir(dir.path())
        .args([
            "report", "a.json", "lot.json", "p.json", "--output", "r.html", "--json",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let written: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        (&written["runs"], &written["probes"]),
        (&Value::from(1), &Value::from(2))
    );
    let html = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
    assert!(html.contains("<section id=\"runs\">") && html.contains("<section id=\"probes\">"));
    // Copies and products for the lot, copies only for the CPU.
    assert_eq!(html.matches("data-chart=\"probe-copies\"").count(), 2);
    assert_eq!(html.matches("data-chart=\"probe-gemms\"").count(), 1);
    let lot_card = &html[html.find("<h3>lot.json</h3>").unwrap()..];
    let lot_card = &lot_card[..lot_card.find("</article>").unwrap()];
    for name in [
        "cuda:0 (NVIDIA H200)",
        "cuda:1 (NVIDIA H200)",
        "datasheet figure",
    ] {
        assert!(lot_card.contains(name), "{name} missing");
    }
    // Every measured figure's percentage of the datasheet is in the table, as the document says.
    let mut judged = 0;
    for d in lot["devices"].as_array().unwrap() {
        for f in d["copies"]
            .as_array()
            .unwrap()
            .iter()
            .chain(d["gemms"].as_array().unwrap())
        {
            if let Some(p) = f["reference"]["percent"].as_f64() {
                let cell = format!("{p:.1}%</td>");
                assert!(lot_card.contains(&cell), "{cell} missing for {f}");
                judged += 1;
            }
        }
    }
    assert!(judged >= 8, "{judged} judged figures");
    // The slower GPU is the lot's outlier, named with its figures.
    assert!(
        lot_card.contains("<li class=\"bad\">lot_outlier: cuda:1"),
        "{lot_card}"
    );
    let cpu_card = &html[html.find("<h3>p.json</h3>").unwrap()..];
    assert!(cpu_card.contains("host memcpy bandwidth only, not a GPU figure"));
    assert!(cpu_card.contains("<td data-label=\"figure\">host memcpy (CPU)</td>"));
}

/// Issue 11, item 15: a sweep's documents are read only by plain file names inside its folder:
/// a summary that names a file elsewhere (or a link to one) is refused, and nothing of it is read.
#[test]
fn a_summary_cannot_make_the_report_read_outside_its_folder() {
    let dir = tempfile::tempdir().unwrap();
    iteragpu()
        .current_dir(dir.path())
        .args(["sweep", "--device", "cpu", "--batch", "1", "--context", "8"])
        .args([
            "--width",
            "16,32",
            "--repeats",
            "2",
            "--output-dir",
            "sweep",
        ])
        .assert()
        .success();
    let summary = dir.path().join("sweep/summary.csv");
    let original = std::fs::read_to_string(&summary).unwrap();
    // A real document outside the folder, so that reading it would succeed.
    std::fs::copy(
        dir.path().join("sweep/point-width-16.json"),
        dir.path().join("outside.json"),
    )
    .unwrap();
    for name in [
        "../outside.json",
        "/etc/passwd",
        "sub/../point-width-32.json",
    ] {
        std::fs::write(&summary, original.replace("point-width-16.json", name)).unwrap();
        iteragpu()
            .current_dir(dir.path())
            .args(["report", "sweep", "--output", "r.html"])
            .assert()
            .code(1)
            .stderr(predicate::str::contains(format!(
                "names the file {name:?}, which is not a file name inside the sweep folder"
            )));
    }
    // A point document replaced by a link to a file elsewhere.
    std::fs::write(&summary, &original).unwrap();
    let point = dir.path().join("sweep/point-width-16.json");
    std::fs::remove_file(&point).unwrap();
    std::os::unix::fs::symlink(dir.path().join("outside.json"), &point).unwrap();
    iteragpu()
        .current_dir(dir.path())
        .args(["report", "sweep", "--output", "r.html"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "not a file name inside the sweep folder",
        ));
    assert!(!dir.path().join("r.html").exists());
    std::fs::remove_file(&point).unwrap();
    std::fs::copy(dir.path().join("outside.json"), &point).unwrap();
    iteragpu()
        .current_dir(dir.path())
        .args(["report", "sweep", "--output", "r.html"])
        .assert()
        .success();
}

/// Price, fit and ledger documents as their commands write them (`--json`): a price with
/// accepted results, a fit, and a ledger of one rental whose run is `measurement`.
fn money(dir: &Path, measurement: &str) {
    let json = |args: &[&str], file: &str| {
        let out = iteragpu()
            .current_dir(dir)
            .args(args)
            .arg("--json")
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        std::fs::write(dir.join(file), out).unwrap();
    };
    json(
        &[
            "price",
            "--gpu",
            "h100-sxm",
            "--days",
            "30",
            "--lots",
            "1",
            "--accepted-results",
            "1200",
        ],
        "price.json",
    );
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/models/llama-3.1-8b");
    json(
        &[
            "fit",
            "--model",
            model.to_str().unwrap(),
            "--context",
            "8192",
            "--days",
            "30",
            "--max-gpus",
            "1",
        ],
        "fit.json",
    );
    let protocol = crate::ledger::locked_protocol(dir);
    iteragpu()
        .current_dir(dir)
        .args(["record", "--results", "results.csv", "--protocol"])
        .arg(&protocol)
        .args(["--measurement", measurement, "--rental", "h200-a"])
        .args([
            "--package",
            "h200:7:1",
            "--submitted",
            "500",
            "--accepted",
            "473",
        ])
        .arg("--allow-device-mismatch")
        .assert()
        .success();
    json(&["cost", "--results", "results.csv"], "cost.json");
}

#[test]
fn price_fit_and_ledger_documents_make_a_cost_section() {
    let dir = tempfile::tempdir().unwrap();
    iteragpu()
        .current_dir(dir.path())
        .args([
            "measure",
            "--device",
            "cpu",
            "--batch",
            "1",
            "--context",
            "8",
        ])
        .args(["--width", "32", "--repeats", "2", "--output", "a.json"])
        .assert()
        .success();
    money(dir.path(), "a.json");
    let out = iteragpu()
        .current_dir(dir.path())
        .args(["report", "a.json", "price.json", "fit.json", "cost.json"])
        .args(["--output", "r.html", "--json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let written: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        (&written["runs"], &written["costs"]),
        (&1.into(), &3.into())
    );
    let html = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
    assert!(html.contains("<section id=\"cost\">"));
    for kind in ["price", "fit", "ledger"] {
        assert!(html.contains(&format!("data-money=\"{kind}\"")), "{kind}");
    }
    // The price: 1646 dollars over 1200 results; the ledger: 605 dollars over 473 accepted.
    for text in [
        "h100-sxm: 30 days x 1 lot (1 GPU)",
        "USD 1646.00 (example price)",
        "USD 1.371667 (example price)",
        "rental h200-a, h200: 7 days x 1 lot",
        "USD 605.00 (example price)",
        ">473<",
        "USD 1.279070 (example price)",
        "all 1 rental(s)",
        "per GPU-day",
        "Rental h200-a, line 2: measured on ",
        "not the package's NVIDIA H200",
    ] {
        assert!(html.contains(text), "{text:?} not in the page");
    }
    // The environment as labelled facts with units, not raw keys and byte counts.
    assert!(
        html.contains("<dt>Host memory, total</dt><dd>"),
        "labelled facts"
    );
    assert!(!html.contains("host_memory.total_bytes"));
    // The sentence names the cost documents.
    iteragpu()
        .current_dir(dir.path())
        .args(["report", "a.json", "price.json", "--output", "s.html"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "1 run(s), 0 sweep(s), 1 cost document(s), 2 charts",
        ));
}

/// Added to a copy of the page: at the window's width, finds every text under 11 px (HTML text
/// by its computed size, SVG text by its size times the chart's scale on screen) and every value
/// cut off: an element whose content is wider than its box, one outside the page that no frame
/// scrolls to, an SVG text outside its chart, and a page that scrolls sideways.
const LAYOUT: &str = r#"<script>
window.addEventListener('load', () => {
  const problems = [];
  // Headless Chromium's window is at least 500 px wide: a narrower screen is the page's root
  // held to that width (the style's narrow-screen rules already apply under 700 px).
  const target = WIDTH;
  if (document.documentElement.clientWidth > target) document.documentElement.style.width = target + 'px';
  const vw = Math.min(target, document.documentElement.clientWidth);
  const frame = el => {
    for (let p = el.parentElement; p; p = p.parentElement) {
      const o = getComputedStyle(p).overflowX;
      if (o === 'auto' || o === 'scroll') return p;
    }
    return null;
  };
  const name = el => el.tagName.toLowerCase() + ' "' + el.textContent.trim().slice(0, 50) + '"';
  let html_texts = 0, svg_texts = 0, smallest = 1e9;
  for (const el of document.querySelectorAll('body *')) {
    if (el.closest('svg') || el.closest('#iteragpu-layout') || el.tagName === 'SCRIPT') continue;
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own && !['TD', 'TH', 'DD', 'DT'].includes(el.tagName)) continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    html_texts++;
    const size = parseFloat(getComputedStyle(el).fontSize);
    smallest = Math.min(smallest, size);
    if (size < 11) problems.push('text of ' + size + ' px: ' + name(el));
    if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1)
      problems.push('content wider than its box (' + el.scrollWidth + ' > ' + el.clientWidth + '): ' + name(el));
    const f = frame(el);
    const box = f ? f.getBoundingClientRect() : { left: 0, right: vw };
    if (!f && (r.right > vw + 0.5 || r.left < -0.5))
      problems.push('off the page (' + r.left + '..' + r.right + ' of ' + vw + '): ' + name(el));
    if (f && (box.right > vw + 0.5 || box.left < -0.5))
      problems.push('a scrolling frame off the page: ' + name(f));
  }
  let svg_shown = 0;
  for (const svg of document.querySelectorAll('svg')) {
    // Every chart is drawn twice (wide and narrow); the style shows the one its frame fits.
    if (svg.getClientRects().length === 0) continue;
    svg_shown++;
    const c = svg.getBoundingClientRect();
    if (c.left < -0.5 || c.right > vw + 0.5)
      problems.push('a chart wider than the page (' + c.left + '..' + c.right + ' of ' + vw + '): ' + svg.getAttribute('class'));
    const fig = svg.closest('figure');
    if (fig && fig.scrollWidth > fig.clientWidth + 0.5)
      problems.push('a chart cut off in its frame (' + fig.scrollWidth + ' > ' + fig.clientWidth + '): ' + fig.dataset.chart);
    const vb = svg.viewBox.baseVal;
    const w = vb && vb.width ? vb.width : svg.width.baseVal.value;
    const h = vb && vb.height ? vb.height : svg.height.baseVal.value;
    const scale = svg.getBoundingClientRect().width / w;
    const f = frame(svg);
    if (!f) problems.push('a chart in no scrolling frame');
    for (const t of svg.querySelectorAll('text')) {
      if (!t.textContent.trim()) continue;
      svg_texts++;
      const size = parseFloat(getComputedStyle(t).fontSize) * scale;
      smallest = Math.min(smallest, size);
      if (size < 11) problems.push('chart text of ' + size.toFixed(1) + ' px: ' + name(t));
      const b = t.getBoundingClientRect(), s = svg.getBoundingClientRect();
      if (b.left < s.left - 0.5 || b.top < s.top - 0.5 || b.right > s.right + 0.5 || b.bottom > s.bottom + 0.5)
        problems.push('chart text outside its chart: ' + name(t));
    }
  }
  const root = document.querySelector('.iteragpu-report');
  if (root.scrollWidth > root.clientWidth + 0.5 || root.getBoundingClientRect().right > vw + 0.5)
    problems.push('the page scrolls sideways: ' + root.scrollWidth + ' > ' + root.clientWidth);
  if (document.body.scrollWidth > document.body.clientWidth + 0.5 || document.body.clientWidth > vw + 0.5)
    problems.push('the body scrolls sideways: ' + document.body.scrollWidth + ' > ' + document.body.clientWidth);
  const pre = document.createElement('pre');
  pre.id = 'iteragpu-layout';
  pre.textContent = JSON.stringify({ viewport: vw, html_texts, svg_texts, svg_shown, smallest, problems });
  document.body.appendChild(pre);
});
</script>"#;

/// The page's policy allows the inline script, which is added before the style; nothing else
/// changes.
fn with_script(html: &str, script: &str) -> String {
    let csp = "content=\"default-src 'none';";
    assert!(html.contains(csp));
    html.replacen(
        csp,
        "content=\"default-src 'none'; script-src 'unsafe-inline';",
        1,
    )
    .replacen("<style>", &format!("{script}\n<style>"), 1)
}

/// The JSON a script left in `<pre id="ID">` of a dumped DOM.
fn dumped(dom: &str, id: &str, log: &str) -> Value {
    let open = format!("<pre id=\"{id}\">");
    let start = dom
        .find(&open)
        .unwrap_or_else(|| panic!("the script did not run; browser log:\n{log}"))
        + open.len();
    let end = start + dom[start..].find("</pre>").unwrap();
    let text = dom[start..end]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&");
    serde_json::from_str(&text).unwrap()
}

/// A phone (390 px) and a desktop (1400 px).
const WIDTHS: [u32; 2] = [390, 1400];

#[test]
fn every_value_and_every_text_of_11_px_or_more_at_390_and_1400_px() {
    let Some(browser) = chromium() else {
        if std::env::var_os("CI").is_some() {
            panic!("CI is set but no Chromium was found: .ci/run installs Debian's `chromium`");
        }
        eprintln!(
            "SKIPPED every_value_and_every_text_of_11_px_or_more_at_390_and_1400_px: no \
             chromium on the PATH (apt-get install chromium, or set CHROMIUM); CI always runs it"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    runs(dir.path());
    money(dir.path(), "a.json");
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-screens");
    std::fs::create_dir_all(&shots).unwrap();
    let reports: [(&str, &[&str]); 3] = [
        ("sweep", &["sweep", "a.json", "c.json"]),
        ("probe", &["p.json"]),
        ("cost", &["price.json", "fit.json", "cost.json", "b.json"]),
    ];
    let mut failures = Vec::new();
    for (name, inputs) in reports {
        let page = dir.path().join(format!("{name}.html"));
        iteragpu()
            .current_dir(dir.path())
            .arg("report")
            .args(inputs)
            .arg("--output")
            .arg(&page)
            .assert()
            .success();
        let html = std::fs::read_to_string(&page).unwrap();
        for width in WIDTHS {
            let probed = dir.path().join(format!("{name}-{width}-layout.html"));
            let script = LAYOUT.replace("WIDTH", &width.to_string());
            std::fs::write(&probed, with_script(&html, &script)).unwrap();
            let profile = tempfile::tempdir().unwrap();
            let (dom, log) = headless(
                &browser,
                profile.path(),
                &[
                    "--dump-dom".into(),
                    "--virtual-time-budget=5000".into(),
                    format!("--window-size={width},2000"),
                ],
                &probed,
            );
            let layout = dumped(&dom, "iteragpu-layout", &log);
            assert_eq!(layout["viewport"], width, "{name}: {layout}");
            assert!(
                layout["html_texts"].as_u64().unwrap() >= 10,
                "{name}: {layout}"
            );
            if name != "cost" {
                assert!(
                    layout["svg_texts"].as_u64().unwrap() >= 8,
                    "{name}: {layout}"
                );
            }
            for p in layout["problems"].as_array().unwrap() {
                failures.push(format!("{name} at {width} px: {}", p.as_str().unwrap()));
            }
            let shot = shots.join(format!("{name}-{width}.png"));
            std::fs::remove_file(&shot).ok();
            let profile = tempfile::tempdir().unwrap();
            headless(
                &browser,
                profile.path(),
                &[
                    format!("--screenshot={}", shot.display()),
                    format!("--window-size={width},3000"),
                ],
                &page,
            );
            let png = std::fs::read(&shot).expect("chromium wrote the screenshot");
            assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
            eprintln!(
                "screenshot: {} (smallest text {} px)",
                shot.display(),
                layout["smallest"]
            );
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// One configuration measured by both engines is drawn side by side, phase by phase; the torch
/// run's document is a copy of a real native one given the torch engine's section (no GPU here),
/// one peak changed so that the table must tell "same" from a difference.
#[test]
fn native_and_torch_runs_of_one_configuration_are_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    iteragpu()
        .current_dir(dir.path())
        .args([
            "measure",
            "--device",
            "cpu",
            "--batch",
            "1",
            "--context",
            "8",
        ])
        .args(["--width", "32", "--output", "native.json"])
        .assert()
        .success();
    let mut v: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("native.json")).unwrap()).unwrap();
    v["engine"] = serde_json::json!({
        "name": "torch", "version": "2.11.0+cu130", "build": "CUDA 13.0",
        "python": "/usr/bin/python3", "blas_libraries": [], "allocator_knobs": {},
    });
    v["phases"][2]["memory"]["peak_allocated_bytes"] = 12345.into();
    std::fs::write(dir.path().join("torch.json"), v.to_string()).unwrap();
    iteragpu()
        .current_dir(dir.path())
        .args(["report", "native.json", "torch.json", "--output", "r.html"])
        .assert()
        .success();
    let html = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
    let section = &html[html
        .find("<section id=\"engines\">")
        .expect("the side-by-side section")..];
    let section = &section[..section.find("</section>").unwrap()];
    assert!(section.contains("native.json and torch.json"), "{section}");
    assert!(section.contains("torch: torch 2.11.0+cu130 (CUDA 13.0)"));
    assert_eq!(section.matches("<tr>").count(), 6, "one row per phase");
    assert_eq!(section.matches(">same</td>").count(), 5, "{section}");
    assert_eq!(section.matches(">differs by ").count(), 1, "{section}");
    assert!(html.contains("<dt>engine</dt><dd>native (iteragpu&#39;s own)</dd>"));
    // A native run alone has no such section.
    iteragpu()
        .current_dir(dir.path())
        .args(["report", "native.json", "--output", "alone.html"])
        .assert()
        .success();
    let alone = std::fs::read_to_string(dir.path().join("alone.html")).unwrap();
    assert!(!alone.contains("<section id=\"engines\">"));
}

/// Added to a copy of the page: at the window's width, the order of the page's parts, each
/// verdict card (its standing, headline, colours and lines), every chart shown (which drawing,
/// where), and the decision table's `fits` cells.
const VERDICT: &str = r#"<script>
window.addEventListener('load', () => {
  const target = WIDTH;
  if (document.documentElement.clientWidth > target) document.documentElement.style.width = target + 'px';
  const vw = Math.min(target, document.documentElement.clientWidth);
  const report = document.querySelector('.iteragpu-report');
  const order = [...report.children].map(e => e.id || e.tagName.toLowerCase());
  const cards = [...document.querySelectorAll('#verdict .verdict')].map(v => {
    const h = v.querySelector('.headline');
    const r = h.getBoundingClientRect();
    return {
      standing: v.dataset.standing, headline: h.textContent.trim(), top: r.top, bottom: r.bottom,
      color: getComputedStyle(h).color, border: getComputedStyle(v).borderTopColor,
      lines: [...v.querySelectorAll('li')].map(l => ({ class: l.className, text: l.textContent.trim() })),
    };
  });
  const charts = [...document.querySelectorAll('svg')].filter(s => s.getClientRects().length > 0).map(s => {
    const r = s.getBoundingClientRect();
    const f = s.closest('figure');
    return { drawing: s.getAttribute('class'), top: r.top, left: r.left, right: r.right,
             frame_scroll: f.scrollWidth - f.clientWidth };
  });
  const fits = [...document.querySelectorAll('td[data-label="fits"]')].map(td =>
    ({ text: td.textContent.trim(), class: td.className, color: getComputedStyle(td).color }));
  const pre = document.createElement('pre');
  pre.id = 'iteragpu-verdict';
  pre.textContent = JSON.stringify({ viewport: vw, body_scroll: document.body.scrollWidth,
    body_client: document.body.clientWidth, order, cards, charts, fits });
  document.body.appendChild(pre);
});
</script>"#;

/// The red of `.bad` and the amber of a `.warn` verdict's border, as Chromium computes them.
const RED: &str = "rgb(164, 0, 15)";

/// The page as Chromium lays it out at 390 and 1400 px (see [`VERDICT`]), or `None` without
/// Chromium (then the test has checked the HTML only).
fn verdict_layouts(dir: &Path, page: &Path, test: &str) -> Option<Vec<(u32, Value)>> {
    let Some(browser) = chromium() else {
        if std::env::var_os("CI").is_some() {
            panic!("CI is set but no Chromium was found: .ci/run installs Debian's `chromium`");
        }
        eprintln!(
            "SKIPPED the browser part of {test}: no chromium on the PATH (apt-get install \
             chromium, or set CHROMIUM); CI always runs it"
        );
        return None;
    };
    let html = std::fs::read_to_string(page).unwrap();
    let mut out = Vec::new();
    for width in WIDTHS {
        let probed = dir.join(format!("{test}-{width}.html"));
        std::fs::write(
            &probed,
            with_script(&html, &VERDICT.replace("WIDTH", &width.to_string())),
        )
        .unwrap();
        let profile = tempfile::tempdir().unwrap();
        let (dom, log) = headless(
            &browser,
            profile.path(),
            &[
                "--dump-dom".into(),
                "--virtual-time-budget=5000".into(),
                format!("--window-size={width},2000"),
            ],
            &probed,
        );
        out.push((width, dumped(&dom, "iteragpu-verdict", &log)));
    }
    Some(out)
}

/// At `width`: the title, then the verdicts; the first verdict stands as `standing`, says
/// `headline` first, is on the first screen of a phone (844 px) and above every chart; no chart
/// is wider than the page or cut off in its frame, and a phone shows the narrow drawings.
fn leads_with(width: u32, v: &Value, standing: &str, headline: &str) {
    assert_eq!(v["viewport"], width, "{v}");
    let order: Vec<&str> = v["order"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap())
        .collect();
    assert_eq!(order[..2], ["h1", "verdict"], "at {width} px: {order:?}");
    let first = &v["cards"][0];
    assert_eq!(first["standing"], standing, "at {width} px: {first}");
    assert!(
        first["headline"].as_str().unwrap().starts_with(headline),
        "at {width} px: {first}"
    );
    assert!(
        first["bottom"].as_f64().unwrap() <= 844.0,
        "the verdict is not on the first screen at {width} px: {first}"
    );
    if standing == "bad" {
        assert_eq!(first["color"], RED, "at {width} px: {first}");
        assert_eq!(first["border"], RED, "at {width} px: {first}");
    }
    assert!(
        v["body_scroll"].as_f64().unwrap() <= v["body_client"].as_f64().unwrap(),
        "the page scrolls sideways at {width} px: {v}"
    );
    for c in v["charts"].as_array().unwrap() {
        let px = |k: &str| c[k].as_f64().unwrap();
        assert!(
            px("top") > first["bottom"].as_f64().unwrap(),
            "a chart above the verdict at {width} px: {c}"
        );
        assert!(
            px("left") >= 0.0 && px("right") <= f64::from(width),
            "a chart wider than the page at {width} px: {c}"
        );
        assert!(
            px("frame_scroll") <= 0.0,
            "a chart cut off at {width} px: {c}"
        );
        let drawing = if width < 500 { "narrow" } else { "wide" };
        assert_eq!(c["drawing"], drawing, "at {width} px: {c}");
    }
}

/// A small real measurement of the CPU reference device: its two charts are on the page, so
/// that the verdict must come before them.
fn small_run(dir: &Path) {
    iteragpu()
        .current_dir(dir)
        .args([
            "measure",
            "--device",
            "cpu",
            "--batch",
            "1",
            "--context",
            "8",
        ])
        .args(["--width", "32", "--repeats", "2", "--output", "run.json"])
        .assert()
        .success();
}

fn fit_json(dir: &Path, file: &str, args: &[&str]) {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/models/llama-3.1-8b");
    let out = iteragpu()
        .current_dir(dir)
        .args([
            "fit",
            "--model",
            model.to_str().unwrap(),
            "--days",
            "7",
            "--json",
        ])
        .args(args)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    std::fs::write(dir.join(file), out).unwrap();
}

#[test]
fn a_fit_that_no_package_holds_says_so_first_at_390_and_1400_px() {
    let dir = tempfile::tempdir().unwrap();
    small_run(dir.path());
    // 64 sequences of 131072 tokens: about 1 TiB of KV cache, on at most 2 GPUs.
    fit_json(
        dir.path(),
        "nofit.json",
        &["--context", "131072", "--batch", "64", "--max-gpus", "2"],
    );
    iteragpu()
        .current_dir(dir.path())
        .args(["report", "run.json", "nofit.json", "--output", "r.html"])
        .assert()
        .success();
    let html = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
    let verdict = html.find("<section id=\"verdict\">").expect("a verdict");
    assert!(verdict < html.find("<p class=\"meta\">").unwrap());
    assert!(verdict < html.find("<figure").unwrap());
    assert!(
        html.find("<section id=\"fit\">").unwrap() < html.find("<section id=\"runs\">").unwrap()
    );
    assert!(
        html.contains(
            "<p class=\"headline bad\"><strong>does not fit: none of the 29 package(s) of up to \
             2 GPUs holds "
        ),
        "{html}"
    );
    assert!(html.contains("fewer than the 8388608 that 64 x 131072 need"));
    // Every row says it in words, in red: never a bare negative headroom.
    let rows = html.matches("<td data-label=\"fits\"").count();
    assert_eq!(rows, 24, "the first 24 of 29 rows");
    assert_eq!(
        html.matches("<td data-label=\"fits\" class=\"bad\">does not fit</td>")
            .count(),
        rows
    );
    assert!(html.contains("24 of the document's 29 rows shown"));
    assert!(
        !html.contains("<section id=\"cost\">"),
        "a fit is not priced twice"
    );
    let Some(layouts) = verdict_layouts(dir.path(), &dir.path().join("r.html"), "nofit") else {
        return;
    };
    for (width, v) in &layouts {
        leads_with(*width, v, "bad", "does not fit: none of the 29 package(s)");
        assert_eq!(v["charts"].as_array().unwrap().len(), 2, "{v}");
        for cell in v["fits"].as_array().unwrap() {
            assert_eq!(cell["text"], "does not fit", "{cell}");
            assert_eq!(cell["color"], RED, "{cell}");
        }
    }
}

#[test]
fn a_failing_fleet_comes_first_before_a_fit_and_any_chart_at_390_and_1400_px() {
    let dir = tempfile::tempdir().unwrap();
    // Two nodes that probed (the CPU reference device) and one whose probe failed, as the
    // batch script leaves them.
    let fleet = dir.path().join("fleet");
    for node in ["n0", "n1"] {
        let n = fleet.join(node);
        std::fs::create_dir_all(&n).unwrap();
        iteragpu()
            .current_dir(&n)
            .args(["probe", "--device", "cpu", "--seconds", "0.2"])
            .args(["--copy-bytes", "1MiB", "--output", "probe.json"])
            .assert()
            .success();
        std::fs::write(n.join("probe.exit"), "0\n").unwrap();
        std::fs::write(n.join("probe.err"), "").unwrap();
    }
    let n2 = fleet.join("n2");
    std::fs::create_dir_all(&n2).unwrap();
    std::fs::write(n2.join("probe.exit"), "1\n").unwrap();
    std::fs::write(
        n2.join("probe.err"),
        "iteragpu: error: the probe on all: cuInit failed (CUDA_ERROR_NO_DEVICE)\n",
    )
    .unwrap();
    iteragpu()
        .current_dir(dir.path())
        .args(["fleet", "check", "fleet"])
        .assert()
        .code(1)
        .stdout(predicate::str::starts_with("verdict: FAILED"));
    // A fit with room to spare, given first: the failing fleet still leads.
    fit_json(
        dir.path(),
        "fit.json",
        &["--context", "8192", "--max-gpus", "1"],
    );
    iteragpu()
        .current_dir(dir.path())
        .args(["report", "fit.json", "fleet", "--output", "r.html"])
        .assert()
        .success();
    let html = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
    let failed = html
        .find("<p class=\"headline bad\"><strong>verdict: FAILED: 1 finding(s) fail the fleet (node_failed)")
        .expect("the fleet's verdict");
    let fits = html
        .find("<p class=\"headline ok\"><strong>fits: ")
        .expect("the fit's verdict");
    assert!(failed < fits && fits < html.find("<figure").unwrap());
    assert!(
        html.contains("<li class=\"bad\">FAIL node_failed: node n2: probe failed with exit code 1")
    );
    assert!(html.contains("<article class=\"card verdict bad\" data-standing=\"bad\""));
    let Some(layouts) = verdict_layouts(dir.path(), &dir.path().join("r.html"), "fleet") else {
        return;
    };
    for (width, v) in &layouts {
        leads_with(
            *width,
            v,
            "bad",
            "verdict: FAILED: 1 finding(s) fail the fleet",
        );
        assert_eq!(v["cards"][1]["standing"], "ok", "{v}");
        assert_eq!(v["cards"][0]["lines"][0]["class"], "bad", "{v}");
        // The fleet's chart and the two probes' copy charts.
        assert_eq!(v["charts"].as_array().unwrap().len(), 3, "{v}");
    }
}

#[test]
fn a_fit_with_room_to_spare_says_fits_and_marks_its_tight_rows() {
    let dir = tempfile::tempdir().unwrap();
    fit_json(dir.path(), "fit.json", &["--context", "8192"]);
    let doc: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("fit.json")).unwrap()).unwrap();
    let options = doc["options"].as_array().unwrap();
    let tight = options.iter().filter(|o| o["tight"] == true).count();
    assert!(tight > 0, "llama-3.1-8b at 8192 tokens is tight on an L4");
    iteragpu()
        .current_dir(dir.path())
        .args(["report", "fit.json", "--output", "r.html"])
        .assert()
        .success();
    let html = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
    assert!(
        html.contains("<p class=\"headline ok\"><strong>fits: "),
        "{html}"
    );
    // The tight rows among the 24 shown are marked tight, in amber, with their reason.
    let shown_tight = options
        .iter()
        .take(24)
        .filter(|o| o["tight"] == true)
        .count();
    assert!(shown_tight > 0);
    assert_eq!(
        html.matches("<td data-label=\"fits\" class=\"warn\">tight</td>")
            .count(),
        shown_tight
    );
    // The verdict names the first tight row, with its reason.
    let first = options.iter().find(|o| o["tight"] == true).unwrap();
    let n = |k: &str| first[k].as_u64().unwrap();
    let layout = &first["layout"];
    let pp = layout["pipeline_parallel"].as_u64().unwrap();
    let package = format!(
        "{} x {} ({} GPU{}, TP{}{}), 7 days",
        n("lots"),
        first["gpu"].as_str().unwrap(),
        n("total_gpus"),
        if n("total_gpus") == 1 { "" } else { "s" },
        layout["tensor_parallel"],
        if pp > 1 {
            format!(" x PP{pp}")
        } else {
            String::new()
        }
    );
    let reason = first["reason"].as_str().unwrap().replace('\'', "&#39;");
    assert!(
        html.contains(&format!(
            "<li class=\"warn\">tight {package}: {reason}</li>"
        )),
        "{package}: {reason}"
    );
    // The engine's budget per GPU, term by term, for the first row (an L4 under vLLM).
    let b = &options[0]["budget"];
    assert_eq!(b["serve"], "vllm");
    let gib = |k: &str| format!("{:.2} GiB", b[k].as_f64().unwrap() / f64::from(1u32 << 30));
    let row = html
        .split("<tr>")
        .find(|r| r.contains("data-label=\"KV cache pool\""))
        .expect("a budget row");
    for k in [
        "total_bytes",
        "budget_bytes",
        "weights_bytes",
        "kv_pool_bytes",
        "margin_bytes",
    ] {
        assert!(row.contains(&gib(k)), "{k}: {row}");
    }
    assert!(row.contains(&format!(">{}<", b["kv_tokens"])), "{row}");
    assert!(html.contains("vllm --gpu-memory-utilization 0.9"));
}

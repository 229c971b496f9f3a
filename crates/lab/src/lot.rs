//! The whole lot: every GPU a package gives, checked for what can cost the renter money.
//!
//! A rented package is a lot of GPUs (a B200 lot holds two). Renters meet a GPU missing from the
//! container, a card of another model or memory size, throttled clocks, a PCIe link trained at a
//! lower generation or width, ECC errors and pages waiting to be retired, a MIG slice instead of
//! a whole GPU, and a neighbour's process holding memory. The CUDA side gathers each GPU's facts
//! ([`GpuFacts`], from the driver and NVML, matched by UUID); this module turns them into named
//! findings ([`Finding`]) with the figures behind each, so the same rules serve `environment
//! --device all` and `probe`, and are tested here without a GPU.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::environment::{Environment, EnvironmentEngine};
use crate::node::NodeIdentity;
use crate::tool::ToolInfo;
use lab_io::bytes::gib;
use rent::datasheet::{Datasheet, pcie_gb_s};

/// Schema identifier of `environment --device all --json` documents.
pub const LOT_SCHEMA: &str = "iteragpu.lot/1";

/// Free memory below the total by more than this share (or [`MIN_MEMORY_IN_USE_BYTES`], the
/// larger) is memory someone else holds: a CUDA context of our own costs far less.
pub const MEMORY_IN_USE_FRACTION: f64 = 0.05;
/// See [`MEMORY_IN_USE_FRACTION`].
pub const MIN_MEMORY_IN_USE_BYTES: u64 = 1 << 30;
/// A total memory more than this share below the catalogue's usable figure is another card.
pub const MEMORY_TOLERANCE_FRACTION: f64 = 0.01;
/// An enforced power limit more than this share below the default is a capped card.
pub const POWER_LIMIT_TOLERANCE_FRACTION: f64 = 0.05;

/// The NVML clock-event (throttle) reasons that slow a card down for reasons the renter does
/// not control: the hardware's slowdown signal, thermal limits, the power brake.
pub const COSTLY_THROTTLE_REASONS: [&str; 4] = [
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
];

/// Another process on a GPU, as NVML lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OtherProcess {
    /// Its process id (the host's: inside a container it may be unknown there).
    pub pid: u32,
    /// The GPU memory it uses, where NVML can say.
    pub used_bytes: Option<u64>,
}

/// What the driver and NVML say about one GPU; every NVML fact is `None` when NVML cannot say.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuFacts {
    /// `cuda:N`.
    pub device: String,
    /// The driver's name for it (`NVIDIA H200`).
    pub name: String,
    /// Its UUID as NVML knows it (`GPU-...` or `MIG-...`).
    pub uuid: String,
    /// `9.0`.
    pub compute_capability: String,
    /// `cuDeviceTotalMem`.
    pub total_memory_bytes: u64,
    /// `cuMemGetInfo` free bytes, read with a context of our own open.
    pub free_memory_bytes: Option<u64>,
    /// Whether NVML knows this GPU by its UUID (without it, the facts below are unknown).
    pub nvml_matched: bool,
    /// Current PCIe link generation.
    pub pcie_generation: Option<u32>,
    /// Current PCIe link width (lanes).
    pub pcie_width: Option<u32>,
    /// The highest generation this GPU can train at in this system.
    pub pcie_max_generation: Option<u32>,
    /// The widest link this GPU can train at in this system.
    pub pcie_max_width: Option<u32>,
    /// The GPU's own highest generation, whatever the host supports.
    pub pcie_gpu_max_generation: Option<u32>,
    /// Current SM clock, MHz.
    pub sm_clock_mhz: Option<u32>,
    /// Highest SM clock, MHz.
    pub max_sm_clock_mhz: Option<u32>,
    /// Active clock-event (throttle) reasons, by name (`hw_slowdown`, `sw_power_cap`, ...).
    pub throttle_reasons: Option<Vec<String>>,
    /// The enforced power limit, W.
    pub power_limit_watts: Option<f64>,
    /// The default power limit, W.
    pub default_power_limit_watts: Option<f64>,
    /// Whether ECC is on.
    pub ecc_enabled: Option<bool>,
    /// Uncorrected ECC errors since the driver loaded.
    pub ecc_uncorrected_volatile: Option<u64>,
    /// Corrected ECC errors since the driver loaded.
    pub ecc_corrected_volatile: Option<u64>,
    /// Pages retired for errors (older GPUs; Ampere and later remap rows instead).
    pub retired_pages: Option<u64>,
    /// Pages waiting to be retired at the next reset.
    pub retired_pages_pending: Option<bool>,
    /// Rows remapped for uncorrectable errors.
    pub remapped_rows_uncorrectable: Option<u32>,
    /// Rows remapped for correctable errors.
    pub remapped_rows_correctable: Option<u32>,
    /// A row remapping waits for the next reset.
    pub row_remap_pending: Option<bool>,
    /// A row remapping failed: the memory has a fault it cannot hide.
    pub row_remap_failure: Option<bool>,
    /// MIG mode on: CUDA sees a slice, not the whole GPU.
    pub mig_enabled: Option<bool>,
    /// Persistence mode (driver kept loaded between processes).
    pub persistence_mode: Option<bool>,
    /// The compute mode NVML gives (`default`, `exclusive_process`, `prohibited`); renters
    /// check it with `nvidia-smi -q -d COMPUTE`: anything but `default` refuses a second process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_mode: Option<String>,
    /// Other processes using the GPU (this process excluded).
    pub other_processes: Option<Vec<OtherProcess>>,
    /// NVLink links active.
    pub nvlink_active_links: Option<u32>,
    /// Its PCI address (`0000:3b:00`, as [`crate::xid::bus_key`] writes it), by which the
    /// kernel log names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    /// The XID errors the kernel log holds for it since boot (its oldest record); `None` when
    /// the log was not read, and then [`GpuFacts::xid_not_checked`] says why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid_errors: Option<Vec<crate::xid::XidCount>>,
    /// Why the XID errors were not checked (the kernel log closed to this process, no PCI
    /// address known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid_not_checked: Option<String>,
}

/// Whether one GPU can reach another's memory directly (`cuDeviceCanAccessPeer`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerAccess {
    /// `cuda:N`.
    pub from: String,
    /// `cuda:M`.
    pub to: String,
    /// The driver's answer.
    pub can_access: bool,
}

/// What a package promises, from the catalogue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expectation {
    /// `b200:7:1`.
    pub package: String,
    /// The catalogue slug.
    pub gpu: String,
    /// Its display name.
    pub model: String,
    /// GPUs per lot.
    pub gpus_per_lot: u32,
    /// Lots.
    pub lots: u32,
    /// GPUs promised: gpus_per_lot x lots.
    pub gpus: u64,
    /// The total MiB a CUDA process sees on one such GPU.
    pub usable_memory_mib: u64,
    /// On one node of a multi-node job: this node's even share of the package (absent on a
    /// single machine, where the whole package is expected).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<NodeShare>,
}

/// One node's part of a package spread over several nodes: package GPUs / nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeShare {
    /// This node's rank, from 0.
    pub node_rank: u32,
    /// The job's nodes.
    pub nodes: u32,
    /// The GPUs this node must hold.
    pub gpus: u64,
}

/// A package whose GPUs do not split evenly over the job's nodes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the package {package} promises {gpus} GPU(s), which do not split evenly over the job's {nodes} nodes: each node would hold {:.2}; rent a package of a multiple of {nodes} GPUs, or run on a number of nodes that divides {gpus}",
    *gpus as f64 / f64::from(*nodes)
)]
pub struct UnevenShare {
    /// `b200:7:1`.
    pub package: String,
    /// The package's GPUs.
    pub gpus: u64,
    /// The job's nodes.
    pub nodes: u32,
}

impl Expectation {
    /// What `lots` lots of the catalogue's `tariff` promise; `package` is its `GPU:DAYS:LOTS`
    /// label. `environment`, `probe` and `fleet` all build their expectation here.
    pub fn new(package: String, tariff: &rent::catalogue::Tariff, lots: u32) -> Expectation {
        Expectation {
            package,
            gpu: tariff.gpu.clone(),
            model: tariff.model.clone(),
            gpus_per_lot: tariff.gpus_per_lot,
            lots,
            gpus: u64::from(tariff.gpus_per_lot) * u64::from(lots),
            usable_memory_mib: tariff.usable_memory_mib,
            share: None,
        }
    }

    /// What this node must hold: on node k of N (N > 1, as the scheduler says) its share,
    /// package GPUs / N, or an error when they do not split evenly; else the whole package.
    pub fn for_node(mut self, node: Option<&NodeIdentity>) -> Result<Expectation, UnevenShare> {
        self.share = None;
        let Some((rank, nodes)) = node.and_then(|n| n.rank.zip(n.count)) else {
            return Ok(self);
        };
        if nodes <= 1 {
            return Ok(self);
        }
        if !self.gpus.is_multiple_of(u64::from(nodes)) {
            return Err(UnevenShare {
                package: self.package.clone(),
                gpus: self.gpus,
                nodes,
            });
        }
        self.share = Some(NodeShare {
            node_rank: rank,
            nodes,
            gpus: self.gpus / u64::from(nodes),
        });
        Ok(self)
    }

    /// The GPUs expected where this expectation is checked: the node's share, or the package.
    pub fn expected_gpus(&self) -> u64 {
        self.share.map_or(self.gpus, |s| s.gpus)
    }
}

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// It can cost the renter money: less of what was paid for.
    Warning,
    /// Worth knowing; costs nothing by itself.
    Note,
}

/// One named finding with its figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// A stable name (`gpu_missing`, `pcie_link_degraded`, ...), for scripts.
    pub code: String,
    /// Warning or note.
    pub severity: Severity,
    /// The GPU it is about (`cuda:1`), or none for the lot as a whole.
    pub device: Option<String>,
    /// One sentence with the figures.
    pub message: String,
    /// The figures, as numbers.
    pub figures: Value,
}

impl Finding {
    /// A warning.
    pub fn warning(code: &str, device: Option<&str>, message: String, figures: Value) -> Finding {
        Finding {
            code: code.to_string(),
            severity: Severity::Warning,
            device: device.map(str::to_string),
            message,
            figures,
        }
    }

    /// A note.
    pub fn note(code: &str, device: Option<&str>, message: String, figures: Value) -> Finding {
        Finding {
            code: code.to_string(),
            severity: Severity::Note,
            device: device.map(str::to_string),
            message,
            figures,
        }
    }
}

/// One GPU of the lot report: its environment (as `environment --device cuda:N` gives it) and
/// the typed facts the checks read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LotDevice {
    /// The environment report of this GPU.
    pub environment: Environment,
    /// Its facts (absent when the GPU could not be described).
    pub facts: Option<GpuFacts>,
}

/// `environment --device all`: every GPU asked for, the peer matrix and the findings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LotReport {
    /// Always [`LOT_SCHEMA`].
    pub schema: String,
    /// The build.
    pub tool: ToolInfo,
    /// `all`, or `cuda:0,1`.
    pub requested_device: String,
    /// GPUs the driver sees (absent without a driver).
    pub visible_devices: Option<usize>,
    /// Whether every GPU asked for was described.
    pub usable: bool,
    /// Why not, in a sentence (no driver, no device, a wrong ordinal).
    pub problem: Option<String>,
    /// What `--package` promises (with this node's share on one node of several).
    pub package: Option<Expectation>,
    /// Which node of a multi-node job this is (absent outside a scheduler unless named).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeIdentity>,
    /// The engine that read the GPUs, when not the native one (`--engine torch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<EnvironmentEngine>,
    /// One entry per GPU asked for.
    pub devices: Vec<LotDevice>,
    /// Every ordered pair of the GPUs asked for.
    pub peers: Vec<PeerAccess>,
    /// The datasheet table the models were looked up in.
    pub datasheet: String,
    /// The findings, warnings first.
    pub findings: Vec<Finding>,
    /// How many findings are warnings.
    pub warnings: usize,
}

fn mib(bytes: u64) -> u64 {
    bytes >> 20
}

/// Every check of the lot. `visible` is the number of GPUs the driver sees (the package count is
/// checked against it, not against a selection). Warnings come first, then notes, each in device
/// order.
pub fn check_lot(
    facts: &[GpuFacts],
    visible: usize,
    peers: &[PeerAccess],
    expectation: Option<&Expectation>,
    datasheet: &Datasheet,
) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(exp) = expectation {
        check_package(&mut out, facts, visible, exp, datasheet);
    }
    check_uniform(&mut out, facts);
    for f in facts {
        check_gpu(&mut out, f, datasheet);
    }
    let blocked: Vec<&PeerAccess> = peers.iter().filter(|p| !p.can_access).collect();
    if !blocked.is_empty() {
        let pairs: Vec<String> = blocked
            .iter()
            .map(|p| format!("{} -> {}", p.from, p.to))
            .collect();
        out.push(Finding::warning(
            "no_peer_access",
            None,
            format!(
                "{} of {} GPU pairs cannot reach each other's memory directly ({}): copies between them go through host memory, which slows every multi-GPU job",
                blocked.len(),
                peers.len(),
                pairs.join(", ")
            ),
            json!({"pairs": pairs, "pairs_checked": peers.len()}),
        ));
    }
    out.sort_by_key(|f| f.severity == Severity::Note);
    out
}

/// The package's checks alone: the GPU count (`visible` against the node's share or the whole
/// package) and each GPU's model and memory. The fleet check runs them over every node's GPUs.
pub fn check_package_findings(
    facts: &[GpuFacts],
    visible: usize,
    exp: &Expectation,
    datasheet: &Datasheet,
) -> Vec<Finding> {
    let mut out = Vec::new();
    check_package(&mut out, facts, visible, exp, datasheet);
    out
}

fn check_package(
    out: &mut Vec<Finding>,
    facts: &[GpuFacts],
    visible: usize,
    exp: &Expectation,
    datasheet: &Datasheet,
) {
    let expected = exp.expected_gpus();
    let seen = visible as u64;
    let promise = match exp.share {
        Some(s) => format!(
            "the package {} promises {} GPU(s) ({} per lot x {} lot(s)) of {} over {} nodes; this is node {} of {}, whose share is {expected}",
            exp.package,
            exp.gpus,
            exp.gpus_per_lot,
            exp.lots,
            exp.model,
            s.nodes,
            s.node_rank + 1,
            s.nodes
        ),
        None => format!(
            "the package {} promises {expected} GPU(s) ({} per lot x {} lot(s)) of {}",
            exp.package, exp.gpus_per_lot, exp.lots, exp.model
        ),
    };
    let place = if exp.share.is_some() {
        "this node"
    } else {
        "this machine or container"
    };
    if seen < expected {
        out.push(Finding::warning(
            "gpu_missing",
            None,
            format!(
                "{promise}; the driver sees {seen}: {} missing from {place}",
                expected - seen
            ),
            json!({"expected_gpus": expected, "visible_gpus": seen, "package_gpus": exp.gpus, "share": exp.share}),
        ));
    } else if seen > expected {
        out.push(Finding::note(
            "gpu_extra",
            None,
            format!("{promise}; the driver sees {seen}: check that the others are yours to use"),
            json!({"expected_gpus": expected, "visible_gpus": seen, "package_gpus": exp.gpus, "share": exp.share}),
        ));
    }
    let rows = datasheet.for_gpu(&exp.gpu);
    let names: Vec<&str> = rows
        .iter()
        .flat_map(|r| r.cuda_names.iter().map(String::as_str))
        .collect();
    for f in facts {
        if !names.is_empty() && !rows.iter().any(|r| r.matches(&f.name)) {
            out.push(Finding::warning(
                "model_mismatch",
                Some(&f.device),
                format!(
                    "{} is a {}, not the {} the package {} promises (CUDA names it {})",
                    f.device,
                    f.name,
                    exp.model,
                    exp.package,
                    names.join(" or ")
                ),
                json!({"expected_model": exp.model, "expected_cuda_names": names, "found": f.name}),
            ));
        }
        let usable_bytes = exp.usable_memory_mib << 20;
        if (f.total_memory_bytes as f64) < usable_bytes as f64 * (1.0 - MEMORY_TOLERANCE_FRACTION) {
            out.push(Finding::warning(
                "memory_below_package",
                Some(&f.device),
                format!(
                    "{} has {} MiB of memory; a {} has {} MiB (the catalogue's usable memory): {} MiB short",
                    f.device,
                    mib(f.total_memory_bytes),
                    exp.model,
                    exp.usable_memory_mib,
                    exp.usable_memory_mib.saturating_sub(mib(f.total_memory_bytes))
                ),
                json!({"total_memory_mib": mib(f.total_memory_bytes), "package_usable_memory_mib": exp.usable_memory_mib}),
            ));
        }
    }
}

fn check_uniform(out: &mut Vec<Finding>, facts: &[GpuFacts]) {
    let mut distinct_names: Vec<&str> = facts.iter().map(|f| f.name.as_str()).collect();
    distinct_names.sort_unstable();
    distinct_names.dedup();
    if distinct_names.len() > 1 {
        let per: Vec<String> = facts
            .iter()
            .map(|f| format!("{} {}", f.device, f.name))
            .collect();
        out.push(Finding::warning(
            "mixed_models",
            None,
            format!(
                "the lot mixes GPU models ({}): a job runs at the pace of the slowest",
                per.join(", ")
            ),
            json!({"models": facts.iter().map(|f| json!({"device": f.device, "name": f.name})).collect::<Vec<_>>()}),
        ));
    }
    let mut totals: Vec<u64> = facts.iter().map(|f| f.total_memory_bytes).collect();
    totals.sort_unstable();
    totals.dedup();
    if totals.len() > 1 {
        let per: Vec<String> = facts
            .iter()
            .map(|f| format!("{} {} MiB", f.device, mib(f.total_memory_bytes)))
            .collect();
        out.push(Finding::warning(
            "mixed_memory",
            None,
            format!(
                "the GPUs of the lot differ in memory ({}): a model split evenly must fit the smallest",
                per.join(", ")
            ),
            json!({"total_memory_mib": facts.iter().map(|f| json!({"device": f.device, "mib": mib(f.total_memory_bytes)})).collect::<Vec<_>>()}),
        ));
    }
}

fn check_gpu(out: &mut Vec<Finding>, f: &GpuFacts, datasheet: &Datasheet) {
    let dev = Some(f.device.as_str());
    let row = datasheet.for_cuda_name(&f.name);
    if row.is_none() {
        out.push(Finding::note(
            "no_datasheet_row",
            dev,
            format!(
                "{} ({}) has no row in the datasheet table {}: its figures cannot be compared with a datasheet",
                f.device,
                f.name,
                datasheet.name()
            ),
            json!({"name": f.name}),
        ));
    }
    if !f.nvml_matched {
        out.push(Finding::note(
            "nvml_unavailable",
            dev,
            format!(
                "NVML does not know {} by its UUID: clocks, throttling, PCIe link, ECC, MIG and other processes were not checked",
                f.device
            ),
            json!({}),
        ));
    }
    if f.mig_enabled == Some(true) {
        out.push(Finding::warning(
            "mig_enabled",
            dev,
            format!(
                "{} has MIG mode on: CUDA sees one instance of the GPU, not the whole card",
                f.device
            ),
            json!({"mig_enabled": true}),
        ));
    }
    if let (Some(g), Some(w), Some(mg), Some(mw)) = (
        f.pcie_generation,
        f.pcie_width,
        f.pcie_max_generation,
        f.pcie_max_width,
    ) && (g < mg || w < mw)
    {
        let now = pcie_gb_s(g, w).unwrap_or(0.0);
        let max = pcie_gb_s(mg, mw).unwrap_or(0.0);
        out.push(Finding::warning(
            "pcie_link_degraded",
            dev,
            format!(
                "{} runs its PCIe link at Gen{g} x{w} ({now:.1} GB/s per direction), not the Gen{mg} x{mw} ({max:.1} GB/s) it can: host copies are slower (an idle GPU may lower its link generation to save power; `iteragpu probe` measures host copies under load)",
                f.device
            ),
            json!({"generation": g, "width": w, "max_generation": mg, "max_width": mw, "gb_s_per_direction": now, "max_gb_s_per_direction": max}),
        ));
    }
    if let (Some(row), Some(mg), Some(mw)) = (row, f.pcie_max_generation, f.pcie_max_width)
        && (mg < row.pcie_generation || mw < row.pcie_lanes)
    {
        out.push(Finding::warning(
            "pcie_slot_below_datasheet",
            dev,
            format!(
                "{} can train its PCIe link at Gen{mg} x{mw} at most in this machine; the {} is built for Gen{} x{}",
                f.device, row.model, row.pcie_generation, row.pcie_lanes
            ),
            json!({"max_generation": mg, "max_width": mw, "datasheet_generation": row.pcie_generation, "datasheet_lanes": row.pcie_lanes}),
        ));
    }
    if let Some(reasons) = &f.throttle_reasons {
        let costly: Vec<&str> = reasons
            .iter()
            .map(String::as_str)
            .filter(|r| COSTLY_THROTTLE_REASONS.contains(r))
            .collect();
        let power_capped_busy =
            reasons.iter().any(|r| r == "sw_power_cap") && !reasons.iter().any(|r| r == "gpu_idle");
        if !costly.is_empty() || power_capped_busy {
            let clocks = match (f.sm_clock_mhz, f.max_sm_clock_mhz) {
                (Some(c), Some(m)) => format!("; SM clock {c} MHz of {m} MHz"),
                _ => String::new(),
            };
            out.push(Finding::warning(
                "clock_throttled",
                dev,
                format!(
                    "{} is slowing its clocks ({}){clocks}",
                    f.device,
                    reasons.join(", ")
                ),
                json!({"reasons": reasons, "sm_clock_mhz": f.sm_clock_mhz, "max_sm_clock_mhz": f.max_sm_clock_mhz}),
            ));
        }
    }
    if let (Some(limit), Some(default)) = (f.power_limit_watts, f.default_power_limit_watts)
        && limit < default * (1.0 - POWER_LIMIT_TOLERANCE_FRACTION)
    {
        out.push(Finding::warning(
            "power_limit_reduced",
            dev,
            format!(
                "{} is capped at {limit:.0} W, below its default {default:.0} W: it cannot reach its full clocks under load",
                f.device
            ),
            json!({"power_limit_watts": limit, "default_power_limit_watts": default}),
        ));
    }
    if let Some(n) = f.ecc_uncorrected_volatile.filter(|n| *n > 0) {
        out.push(Finding::warning(
            "ecc_uncorrected_errors",
            dev,
            format!(
                "{} has had {n} uncorrected ECC error(s) since the driver loaded: a job on it can crash or compute wrong results",
                f.device
            ),
            json!({"uncorrected_volatile": n, "corrected_volatile": f.ecc_corrected_volatile}),
        ));
    }
    if f.retired_pages_pending == Some(true) {
        out.push(Finding::warning(
            "retired_pages_pending",
            dev,
            format!(
                "{} has memory pages waiting to be retired ({} retired so far): the GPU needs a reset",
                f.device,
                f.retired_pages.map_or("unknown".to_string(), |n| n.to_string())
            ),
            json!({"retired_pages": f.retired_pages, "pending": true}),
        ));
    }
    if f.row_remap_failure == Some(true) {
        out.push(Finding::warning(
            "row_remap_failure",
            dev,
            format!(
                "{} failed to remap a memory row: its memory has a fault it cannot hide; ask for another GPU",
                f.device
            ),
            json!({"remapped_rows_uncorrectable": f.remapped_rows_uncorrectable, "remapped_rows_correctable": f.remapped_rows_correctable}),
        ));
    } else if f.row_remap_pending == Some(true) {
        out.push(Finding::warning(
            "row_remap_pending",
            dev,
            format!(
                "{} has a memory row remapping waiting for the next reset: until then the faulty row is in use",
                f.device
            ),
            json!({"remapped_rows_uncorrectable": f.remapped_rows_uncorrectable, "remapped_rows_correctable": f.remapped_rows_correctable}),
        ));
    }
    if f.ecc_enabled == Some(false) {
        out.push(Finding::note(
            "ecc_disabled",
            dev,
            format!(
                "{} has ECC off: more memory, but memory errors go undetected",
                f.device
            ),
            json!({"ecc_enabled": false}),
        ));
    }
    if f.persistence_mode == Some(false) {
        out.push(Finding::note(
            "persistence_off",
            dev,
            format!(
                "{} has persistence mode off: every new process waits while the driver initialises the GPU",
                f.device
            ),
            json!({"persistence_mode": false}),
        ));
    }
    if let Some(errors) = f.xid_errors.as_deref().filter(|e| !e.is_empty()) {
        let list = errors
            .iter()
            .map(|x| format!("XID {} x{}", x.code, x.count))
            .collect::<Vec<_>>()
            .join(", ");
        let counts = json!(errors);
        if errors.iter().any(|x| crate::xid::is_hardware(x.code)) {
            out.push(Finding::warning(
                "xid_hardware",
                dev,
                format!(
                    "{}'s driver logged {list} since boot, among them a fault of the GPU itself (memory, bus, NVLink or firmware): ask for another GPU or a reset",
                    f.device
                ),
                json!({"xid_errors": counts}),
            ));
        } else {
            out.push(Finding::note(
                "xid_application",
                dev,
                format!(
                    "{}'s driver logged {list} since boot: XIDs a program's own fault raises, not the GPU's",
                    f.device
                ),
                json!({"xid_errors": counts}),
            ));
        }
    }
    match f.compute_mode.as_deref() {
        None | Some("default") => {}
        Some("prohibited") => out.push(Finding::warning(
            "compute_mode_prohibited",
            dev,
            format!(
                "{} is in compute mode prohibited: no process can run on it",
                f.device
            ),
            json!({"compute_mode": "prohibited"}),
        )),
        Some(mode) => out.push(Finding::note(
            "compute_mode_exclusive",
            dev,
            format!(
                "{} is in compute mode {mode}: one process at a time, so a job with several processes per GPU fails on it",
                f.device
            ),
            json!({"compute_mode": mode}),
        )),
    }
    let others = f.other_processes.as_deref().unwrap_or_default();
    if !others.is_empty() {
        let used: u64 = others.iter().filter_map(|p| p.used_bytes).sum();
        let list: Vec<String> = others
            .iter()
            .map(|p| match p.used_bytes {
                Some(b) => format!("pid {} {} GiB", p.pid, gib(b, 2)),
                None => format!("pid {} (memory not reported)", p.pid),
            })
            .collect();
        out.push(Finding::warning(
            "other_processes",
            dev,
            format!(
                "{} is shared: {} other process(es) use it ({}), {} GiB of its memory in all",
                f.device,
                others.len(),
                list.join(", "),
                gib(used, 2)
            ),
            json!({"processes": others, "used_bytes": used, "free_memory_bytes": f.free_memory_bytes}),
        ));
    } else if let Some(free) = f.free_memory_bytes {
        let slack = ((f.total_memory_bytes as f64 * MEMORY_IN_USE_FRACTION) as u64)
            .max(MIN_MEMORY_IN_USE_BYTES);
        let held = f.total_memory_bytes.saturating_sub(free);
        if held > slack {
            out.push(Finding::warning(
                "memory_in_use",
                dev,
                format!(
                    "{} has {} GiB free of {} GiB: {} GiB is held by something no process list shows (another container, or a leak)",
                    f.device,
                    gib(free, 2),
                    gib(f.total_memory_bytes, 2),
                    gib(held, 2)
                ),
                json!({"free_memory_bytes": free, "total_memory_bytes": f.total_memory_bytes, "held_bytes": held}),
            ));
        }
    }
    if let (Some(row), Some(active)) = (row, f.nvlink_active_links)
        && let Some(expected) = row.nvlink_links
        && active < expected
    {
        out.push(Finding::warning(
            "nvlink_links_down",
            dev,
            format!(
                "{} has {active} of its {expected} NVLink links active: GPU-to-GPU bandwidth is cut to about {:.0}%",
                f.device,
                f64::from(active) / f64::from(expected) * 100.0
            ),
            json!({"active_links": active, "expected_links": expected}),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h200(device: &str) -> GpuFacts {
        GpuFacts {
            device: device.to_string(),
            name: "NVIDIA H200".into(),
            uuid: format!("GPU-{device}"),
            compute_capability: "9.0".into(),
            total_memory_bytes: 143_156 << 20,
            free_memory_bytes: Some((143_156 - 600) << 20),
            nvml_matched: true,
            pcie_generation: Some(5),
            pcie_width: Some(16),
            pcie_max_generation: Some(5),
            pcie_max_width: Some(16),
            pcie_gpu_max_generation: Some(5),
            sm_clock_mhz: Some(1980),
            max_sm_clock_mhz: Some(1980),
            throttle_reasons: Some(vec![]),
            power_limit_watts: Some(700.0),
            default_power_limit_watts: Some(700.0),
            ecc_enabled: Some(true),
            ecc_uncorrected_volatile: Some(0),
            ecc_corrected_volatile: Some(0),
            retired_pages: Some(0),
            retired_pages_pending: Some(false),
            remapped_rows_uncorrectable: Some(0),
            remapped_rows_correctable: Some(0),
            row_remap_pending: Some(false),
            row_remap_failure: Some(false),
            mig_enabled: Some(false),
            persistence_mode: Some(true),
            compute_mode: None,
            other_processes: Some(vec![]),
            nvlink_active_links: Some(18),
            pci_bus_id: Some("0000:3b:00".into()),
            xid_errors: Some(vec![]),
            xid_not_checked: None,
        }
    }

    fn package(gpus: u64) -> Expectation {
        Expectation {
            package: format!("h200:7:{gpus}"),
            gpu: "h200".into(),
            model: "NVIDIA H200".into(),
            gpus_per_lot: 1,
            lots: gpus as u32,
            gpus,
            usable_memory_mib: 143_156,
            share: None,
        }
    }

    fn codes(findings: &[Finding]) -> Vec<(&str, Option<&str>)> {
        findings
            .iter()
            .map(|f| (f.code.as_str(), f.device.as_deref()))
            .collect()
    }

    fn check(facts: &[GpuFacts], visible: usize, exp: Option<&Expectation>) -> Vec<Finding> {
        check_lot(facts, visible, &[], exp, &Datasheet::embedded())
    }

    #[test]
    fn a_healthy_lot_has_no_finding() {
        let lot = [h200("cuda:0"), h200("cuda:1")];
        assert!(check(&lot, 2, Some(&package(2))).is_empty());
    }

    #[test]
    fn a_missing_gpu_is_warned_against_the_package() {
        let f = check(&[h200("cuda:0")], 1, Some(&package(2)));
        assert_eq!(codes(&f), [("gpu_missing", None)]);
        assert_eq!(f[0].figures["expected_gpus"], 2);
        assert_eq!(f[0].figures["visible_gpus"], 1);
        assert!(
            f[0].message.contains("promises 2 GPU(s)"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn a_degraded_link_is_warned_with_its_figures() {
        let mut slow = h200("cuda:1");
        slow.pcie_generation = Some(3);
        slow.pcie_width = Some(8);
        let f = check(&[h200("cuda:0"), slow], 2, None);
        assert_eq!(codes(&f), [("pcie_link_degraded", Some("cuda:1"))]);
        assert!(
            f[0].message
                .contains("Gen3 x8 (7.9 GB/s per direction), not the Gen5 x16 (63.0 GB/s)"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn a_gen4_slot_under_a_gen5_gpu_is_warned() {
        let mut g = h200("cuda:0");
        g.pcie_generation = Some(4);
        g.pcie_max_generation = Some(4);
        let f = check(&[g], 1, None);
        assert_eq!(codes(&f), [("pcie_slot_below_datasheet", Some("cuda:0"))]);
    }

    #[test]
    fn throttling_power_caps_and_memory_faults_are_warned() {
        let mut g = h200("cuda:0");
        g.throttle_reasons = Some(vec!["hw_slowdown".into()]);
        g.sm_clock_mhz = Some(1200);
        g.power_limit_watts = Some(400.0);
        g.ecc_uncorrected_volatile = Some(2);
        g.row_remap_pending = Some(true);
        g.retired_pages_pending = Some(true);
        let f = check(&[g], 1, None);
        let c: Vec<&str> = f.iter().map(|f| f.code.as_str()).collect();
        assert_eq!(
            c,
            [
                "clock_throttled",
                "power_limit_reduced",
                "ecc_uncorrected_errors",
                "retired_pages_pending",
                "row_remap_pending"
            ]
        );
        assert!(f[0].message.contains("SM clock 1200 MHz of 1980 MHz"));
    }

    #[test]
    fn an_idle_gpu_at_its_power_cap_is_not_throttled() {
        let mut g = h200("cuda:0");
        g.throttle_reasons = Some(vec!["gpu_idle".into(), "sw_power_cap".into()]);
        assert!(check(&[g.clone()], 1, None).is_empty());
        g.throttle_reasons = Some(vec!["sw_power_cap".into()]);
        assert_eq!(
            codes(&check(&[g], 1, None)),
            [("clock_throttled", Some("cuda:0"))]
        );
    }

    #[test]
    fn a_neighbour_holding_memory_is_warned_with_its_bytes() {
        let mut g = h200("cuda:0");
        g.other_processes = Some(vec![OtherProcess {
            pid: 4242,
            used_bytes: Some(8 << 30),
        }]);
        let f = check(&[g.clone()], 1, None);
        assert_eq!(codes(&f), [("other_processes", Some("cuda:0"))]);
        assert_eq!(f[0].figures["used_bytes"], 8u64 << 30);
        assert!(
            f[0].message.contains("pid 4242 8.00 GiB"),
            "{}",
            f[0].message
        );
        // Memory held with no process listed (another container) is warned too.
        g.other_processes = Some(vec![]);
        g.free_memory_bytes = Some(100 << 30);
        assert_eq!(
            codes(&check(&[g], 1, None)),
            [("memory_in_use", Some("cuda:0"))]
        );
    }

    #[test]
    fn another_model_or_smaller_card_is_warned_against_the_package() {
        let mut g = h200("cuda:0");
        g.name = "NVIDIA H100 80GB HBM3".into();
        g.total_memory_bytes = 81_106 << 20;
        let f = check(&[g, h200("cuda:1")], 2, Some(&package(2)));
        let c: Vec<&str> = f.iter().map(|f| f.code.as_str()).collect();
        assert_eq!(
            c,
            [
                "model_mismatch",
                "memory_below_package",
                "mixed_models",
                "mixed_memory"
            ]
        );
    }

    #[test]
    fn mig_links_peers_and_notes() {
        let mut g = h200("cuda:0");
        g.mig_enabled = Some(true);
        g.nvlink_active_links = Some(12);
        g.persistence_mode = Some(false);
        let peers = [
            PeerAccess {
                from: "cuda:0".into(),
                to: "cuda:1".into(),
                can_access: false,
            },
            PeerAccess {
                from: "cuda:1".into(),
                to: "cuda:0".into(),
                can_access: true,
            },
        ];
        let f = check_lot(
            &[g, h200("cuda:1")],
            2,
            &peers,
            None,
            &Datasheet::embedded(),
        );
        let c: Vec<&str> = f.iter().map(|f| f.code.as_str()).collect();
        assert_eq!(
            c,
            [
                "mig_enabled",
                "nvlink_links_down",
                "no_peer_access",
                "persistence_off"
            ]
        );
        assert!(f[1].message.contains("12 of its 18 NVLink links"));
        assert_eq!(f[3].severity, Severity::Note);
    }

    #[test]
    fn a_compute_mode_other_than_default_is_named() {
        let mut g = GpuFacts {
            device: "cuda:0".into(),
            name: "NVIDIA B200".into(),
            nvml_matched: true,
            compute_mode: Some("prohibited".into()),
            ..GpuFacts::default()
        };
        let sheet = Datasheet::embedded();
        let gpu_findings = |g: &GpuFacts, sheet: &Datasheet| {
            let mut out = Vec::new();
            check_gpu(&mut out, g, sheet);
            out
        };
        let f = gpu_findings(&g, &sheet);
        let c: Vec<(&str, Severity)> = f.iter().map(|f| (f.code.as_str(), f.severity)).collect();
        assert!(
            c.contains(&("compute_mode_prohibited", Severity::Warning)),
            "{c:?}"
        );
        g.compute_mode = Some("exclusive_process".into());
        let f = gpu_findings(&g, &sheet);
        assert!(
            f.iter()
                .any(|f| f.code == "compute_mode_exclusive" && f.severity == Severity::Note)
        );
        g.compute_mode = Some("default".into());
        assert!(
            !gpu_findings(&g, &sheet)
                .iter()
                .any(|f| f.code.starts_with("compute_mode"))
        );
    }

    #[test]
    fn a_hardware_xid_warns_and_an_application_xid_is_a_note() {
        use crate::xid::XidCount;
        let sheet = Datasheet::embedded();
        let found = |g: &GpuFacts| {
            let mut out = Vec::new();
            check_gpu(&mut out, g, &sheet);
            out.into_iter()
                .filter(|f| f.code.starts_with("xid"))
                .map(|f| (f.code, f.severity, f.message))
                .collect::<Vec<_>>()
        };
        let mut g = h200("cuda:0");
        g.xid_errors = Some(vec![
            XidCount { code: 13, count: 2 },
            XidCount { code: 79, count: 1 },
        ]);
        let f = found(&g);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            (f[0].0.as_str(), f[0].1),
            ("xid_hardware", Severity::Warning)
        );
        assert!(f[0].2.contains("XID 13 x2, XID 79 x1"), "{}", f[0].2);
        g.xid_errors = Some(vec![XidCount { code: 13, count: 2 }]);
        let f = found(&g);
        assert_eq!(
            (f[0].0.as_str(), f[0].1),
            ("xid_application", Severity::Note)
        );
        // Not checked is recorded in the facts, and judged by the fleet (never read as none),
        // not repeated as a note on every GPU of a machine whose kernel log is closed.
        g.xid_errors = None;
        g.xid_not_checked = Some("the kernel log is not readable here".into());
        assert!(found(&g).is_empty());
        // No XID logged: nothing said.
        assert!(found(&h200("cuda:1")).is_empty());
    }

    #[test]
    fn unknown_models_and_missing_nvml_are_notes() {
        let g = GpuFacts {
            device: "cuda:0".into(),
            name: "Stub GPU".into(),
            total_memory_bytes: 1 << 34,
            ..GpuFacts::default()
        };
        let f = check(&[g], 1, None);
        assert_eq!(
            codes(&f),
            [
                ("no_datasheet_row", Some("cuda:0")),
                ("nvml_unavailable", Some("cuda:0"))
            ]
        );
        assert!(f.iter().all(|f| f.severity == Severity::Note));
    }

    fn node(rank: u32, count: u32) -> NodeIdentity {
        NodeIdentity {
            source: crate::node::NodeSource::Slurm,
            name: Some(format!("n{rank}")),
            rank: Some(rank),
            count: Some(count),
            job_id: Some("7".into()),
        }
    }

    #[test]
    fn one_node_of_several_expects_its_share_not_the_package() {
        // h200:7:8 over 4 nodes: 2 GPUs each.
        let exp = package(8).for_node(Some(&node(1, 4))).unwrap();
        assert_eq!(
            exp.share,
            Some(NodeShare {
                node_rank: 1,
                nodes: 4,
                gpus: 2
            })
        );
        assert_eq!(exp.expected_gpus(), 2);
        let lot = [h200("cuda:0"), h200("cuda:1")];
        assert!(check(&lot, 2, Some(&exp)).is_empty());
        let f = check(&lot[..1], 1, Some(&exp));
        assert_eq!(codes(&f), [("gpu_missing", None)]);
        assert!(
            f[0].message.contains("over 4 nodes; this is node 2 of 4, whose share is 2; the driver sees 1: 1 missing from this node"),
            "{}",
            f[0].message
        );
        // One node, or no scheduler: the whole package.
        assert_eq!(
            package(8)
                .for_node(Some(&node(0, 1)))
                .unwrap()
                .expected_gpus(),
            8
        );
        assert_eq!(package(8).for_node(None).unwrap().expected_gpus(), 8);
    }

    #[test]
    fn a_package_that_does_not_split_evenly_is_refused() {
        let e = package(2).for_node(Some(&node(0, 4))).unwrap_err();
        assert!(
            e.to_string()
                .contains("promises 2 GPU(s), which do not split evenly over the job's 4 nodes"),
            "{e}"
        );
    }
}

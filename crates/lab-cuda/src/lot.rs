//! `environment --device all` (or `cuda:0,1`): every GPU asked for, each described as
//! `environment --device cuda:N` describes one, with the typed facts the lot checks read, and the
//! peer-access matrix. CUDA ordinals are matched to NVML devices by UUID (NVML's indices are not
//! CUDA's when CUDA_VISIBLE_DEVICES reorders the GPUs).

use lab::environment::Environment;
use lab::lot::{GpuFacts, LotDevice, PeerAccess};
use lab::tool::ToolInfo;

use crate::copies::CopyApi;
use crate::driver::{Driver, format_uuid};
use crate::environment::environment;
use crate::error::CudaError;
use crate::nvml::{self, NvmlHandle};

/// Which GPUs to look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Every GPU the driver sees.
    All,
    /// These CUDA ordinals, in this order.
    Ordinals(Vec<usize>),
}

/// Parses `all`, `cuda:0,1` or `cuda:0,cuda:1` (a single `cuda:N` is not a selection: it is the
/// one-GPU report). Repeated ordinals are refused.
pub fn parse_selection(text: &str) -> Option<Selection> {
    if text == "all" {
        return Some(Selection::All);
    }
    let rest = text.strip_prefix("cuda:")?;
    if !rest.contains(',') {
        return None;
    }
    let mut out: Vec<usize> = Vec::new();
    for part in rest.split(',') {
        let digits = part.strip_prefix("cuda:").unwrap_or(part);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let n: usize = digits.parse().ok()?;
        if out.contains(&n) {
            return None;
        }
        out.push(n);
    }
    Some(Selection::Ordinals(out))
}

impl Selection {
    /// The ordinals of a machine with `visible` GPUs.
    pub fn ordinals(&self, visible: usize) -> Vec<usize> {
        match self {
            Selection::All => (0..visible).collect(),
            Selection::Ordinals(o) => o.clone(),
        }
    }

    /// How it was asked for (`all`, `cuda:0,1`).
    pub fn describe(&self) -> String {
        match self {
            Selection::All => "all".to_string(),
            Selection::Ordinals(o) => format!(
                "cuda:{}",
                o.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
            ),
        }
    }
}

/// What a scan of the lot found.
#[derive(Debug)]
pub struct LotScan {
    /// GPUs the driver sees (absent without a usable driver).
    pub visible: Option<usize>,
    /// Why the lot could not be described in full (no driver, an ordinal past the last GPU).
    pub problem: Option<CudaError>,
    /// One entry per GPU asked for that exists.
    pub devices: Vec<LotDevice>,
    /// Every ordered pair of those GPUs.
    pub peers: Vec<PeerAccess>,
}

/// Describes every GPU of `selection`. Never fails: what could not be learnt is the `problem`.
pub fn scan(selection: &Selection, tool: &ToolInfo) -> LotScan {
    let mut out = LotScan {
        visible: None,
        problem: None,
        devices: Vec::new(),
        peers: Vec::new(),
    };
    let driver = match Driver::load() {
        Ok(d) => d,
        Err(e) => {
            out.problem = Some(e);
            return out;
        }
    };
    let visible = match driver.device_count() {
        Ok(n) => n,
        Err(e) => {
            out.problem = Some(e);
            return out;
        }
    };
    out.visible = Some(visible);
    if visible == 0 {
        out.problem = Some(CudaError::NoDevice {
            path: driver.path.clone(),
        });
        return out;
    }
    let nvml = nvml::open().ok();
    let mut present = Vec::new();
    for ordinal in selection.ordinals(visible) {
        if ordinal >= visible {
            out.problem.get_or_insert(CudaError::BadOrdinal {
                ordinal,
                count: visible,
            });
            continue;
        }
        let environment: Environment = environment(ordinal, tool.clone());
        let facts = gpu_facts(&driver, nvml.as_ref(), ordinal).ok();
        out.devices.push(LotDevice { environment, facts });
        present.push(ordinal);
    }
    if let Ok(api) = CopyApi::load(&driver) {
        for &i in &present {
            for &j in &present {
                if i == j {
                    continue;
                }
                let (Ok(a), Ok(b)) = (driver.device(i), driver.device(j)) else {
                    continue;
                };
                if let Ok(can) = api.can_access_peer(&driver, a, b) {
                    out.peers.push(PeerAccess {
                        from: format!("cuda:{i}"),
                        to: format!("cuda:{j}"),
                        can_access: can,
                    });
                }
            }
        }
    }
    out
}

/// The facts of `cuda:ordinal` from the driver (name, UUID, memory, free memory with a context
/// of ours open) and from NVML, matched by UUID.
pub fn gpu_facts(
    driver: &Driver,
    nvml: Option<&NvmlHandle>,
    ordinal: usize,
) -> Result<GpuFacts, CudaError> {
    let dev = driver.device(ordinal)?;
    let d = driver.facts(dev)?;
    driver.retain_primary_context(dev)?;
    let free = driver.mem_get_info().ok().map(|(free, _)| free);
    driver.release_primary_context(dev);
    let mut facts = GpuFacts {
        device: format!("cuda:{ordinal}"),
        name: d.name,
        uuid: format_uuid("GPU", &d.uuid),
        compute_capability: format!("{}.{}", d.major, d.minor),
        total_memory_bytes: d.total_bytes,
        free_memory_bytes: free,
        ..GpuFacts::default()
    };
    if let Some(h) = nvml
        && let Some(uuid) = h.uuid_of(&d.uuid)
    {
        h.fill_facts(&uuid, &mut facts);
    }
    Ok(facts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selections() {
        assert_eq!(parse_selection("all"), Some(Selection::All));
        assert_eq!(
            parse_selection("cuda:0,1"),
            Some(Selection::Ordinals(vec![0, 1]))
        );
        assert_eq!(
            parse_selection("cuda:2,cuda:0"),
            Some(Selection::Ordinals(vec![2, 0]))
        );
        assert_eq!(parse_selection("cuda:0"), None);
        assert_eq!(parse_selection("cuda:0,0"), None);
        assert_eq!(parse_selection("cuda:0,"), None);
        assert_eq!(parse_selection("cuda:0,x"), None);
        assert_eq!(parse_selection("gpu:0,1"), None);
        assert_eq!(Selection::Ordinals(vec![0, 1]).describe(), "cuda:0,1");
        assert_eq!(Selection::All.ordinals(3), vec![0, 1, 2]);
    }

    #[test]
    fn a_scan_without_a_gpu_says_why() {
        let s = scan(&Selection::All, &ToolInfo::new(None));
        if s.visible.is_none() {
            assert!(s.problem.is_some() && s.devices.is_empty());
        }
    }
}

//! Which node of a multi-node job a document came from: the scheduler's node name, rank and
//! count, and the job id.
//!
//! Read from the scheduler's own variables and nothing else in the environment (the kit's privacy
//! rule: no environment variables, no host or user names in documents): Slurm's
//! `SLURMD_NODENAME`, `SLURM_NODEID`, `SLURM_JOB_NUM_NODES` (or `SLURM_NNODES`) and
//! `SLURM_JOB_ID`; SkyPilot's `SKYPILOT_NODE_RANK`, `SKYPILOT_NUM_NODES` and
//! `SKYPILOT_TASK_ID`. Outside a scheduler no node is recorded unless one is named by hand
//! (`--node NAME`). Every value is checked before it is kept: a name or job id that is not a
//! short plain token is dropped, never copied into a document.

use serde::{Deserialize, Serialize};

/// The longest node name or job id kept.
pub const MAX_TOKEN_CHARS: usize = 128;

/// The variables read, and only these.
pub const SCHEDULER_VARIABLES: [&str; 8] = [
    "SLURMD_NODENAME",
    "SLURM_NODEID",
    "SLURM_JOB_NUM_NODES",
    "SLURM_NNODES",
    "SLURM_JOB_ID",
    "SKYPILOT_NODE_RANK",
    "SKYPILOT_NUM_NODES",
    "SKYPILOT_TASK_ID",
];

/// Who said which node this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeSource {
    /// Slurm's variables.
    Slurm,
    /// SkyPilot's variables.
    Skypilot,
    /// `--node NAME`, outside a scheduler.
    Manual,
}

/// One node of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeIdentity {
    /// Who said it.
    pub source: NodeSource,
    /// The scheduler's name for the node (`SLURMD_NODENAME`), or `--node NAME`.
    pub name: Option<String>,
    /// Its rank among the job's nodes, from 0 (`SLURM_NODEID`, `SKYPILOT_NODE_RANK`).
    pub rank: Option<u32>,
    /// The job's nodes (`SLURM_JOB_NUM_NODES`, `SKYPILOT_NUM_NODES`).
    pub count: Option<u32>,
    /// The job (`SLURM_JOB_ID`, `SKYPILOT_TASK_ID`).
    pub job_id: Option<String>,
}

/// A name or id kept only when it is a short plain token (letters, digits, `.`, `_`, `-`, `:`):
/// nothing that could carry markup, a path or a sentence.
fn token(value: Option<String>) -> Option<String> {
    let v = value?.trim().to_string();
    let plain = !v.is_empty()
        && v.chars().count() <= MAX_TOKEN_CHARS
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'));
    plain.then_some(v)
}

fn number(value: Option<String>) -> Option<u32> {
    value?.trim().parse().ok()
}

/// Checks a `--node NAME` value.
pub fn parse_node_name(text: &str) -> Result<String, String> {
    token(Some(text.to_string())).ok_or_else(|| {
        format!(
            "`{text}` is not a node name: expected up to {MAX_TOKEN_CHARS} letters, digits, `.`, `_`, `-` or `:`, such as node-3"
        )
    })
}

impl NodeIdentity {
    /// The node as the scheduler's variables say, `get` reading one variable (only those of
    /// [`SCHEDULER_VARIABLES`] are asked for). `None` outside Slurm and SkyPilot.
    pub fn from_scheduler(get: impl Fn(&str) -> Option<String>) -> Option<NodeIdentity> {
        let get = |name: &str| {
            debug_assert!(SCHEDULER_VARIABLES.contains(&name));
            get(name)
        };
        if get("SLURM_JOB_ID").is_some() || get("SLURM_NODEID").is_some() {
            let count = number(get("SLURM_JOB_NUM_NODES")).or_else(|| number(get("SLURM_NNODES")));
            return Some(NodeIdentity {
                source: NodeSource::Slurm,
                name: token(get("SLURMD_NODENAME")),
                rank: number(get("SLURM_NODEID")),
                count,
                job_id: token(get("SLURM_JOB_ID")),
            });
        }
        if get("SKYPILOT_NODE_RANK").is_some() || get("SKYPILOT_TASK_ID").is_some() {
            return Some(NodeIdentity {
                source: NodeSource::Skypilot,
                name: None,
                rank: number(get("SKYPILOT_NODE_RANK")),
                count: number(get("SKYPILOT_NUM_NODES")),
                job_id: token(get("SKYPILOT_TASK_ID")),
            });
        }
        None
    }

    /// This process's node: the scheduler's variables, with `name` (`--node NAME`, already
    /// checked by [`parse_node_name`]) in place of the scheduler's name when given.
    pub fn detect(name: Option<&str>) -> Option<NodeIdentity> {
        Self::resolve(name, |v| std::env::var(v).ok())
    }

    /// [`NodeIdentity::detect`] over any variable source (tests).
    pub fn resolve(
        name: Option<&str>,
        get: impl Fn(&str) -> Option<String>,
    ) -> Option<NodeIdentity> {
        let mut node = Self::from_scheduler(get);
        if let Some(name) = name.and_then(|n| token(Some(n.to_string()))) {
            match &mut node {
                Some(n) => n.name = Some(name),
                None => {
                    node = Some(NodeIdentity {
                        source: NodeSource::Manual,
                        name: Some(name),
                        rank: None,
                        count: None,
                        job_id: None,
                    });
                }
            }
        }
        node
    }

    /// `node 2 of 4`, when rank and count are known.
    pub fn position(&self) -> Option<String> {
        match (self.rank, self.count) {
            (Some(r), Some(c)) => Some(format!("node {} of {c}", r + 1)),
            _ => None,
        }
    }

    /// One line: `n3 (node 2 of 4, slurm job 1234)`.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if let Some(p) = self.position() {
            parts.push(p);
        } else if let Some(r) = self.rank {
            parts.push(format!("rank {r}"));
        }
        let source = match self.source {
            NodeSource::Slurm => "slurm",
            NodeSource::Skypilot => "skypilot",
            NodeSource::Manual => "named by hand",
        };
        match &self.job_id {
            Some(j) => parts.push(format!("{source} job {j}")),
            None => parts.push(source.to_string()),
        }
        format!(
            "{} ({})",
            self.name.as_deref().unwrap_or("unnamed node"),
            parts.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn slurm_gives_name_rank_count_and_job() {
        let n = NodeIdentity::from_scheduler(vars(&[
            ("SLURMD_NODENAME", "gpu-n1"),
            ("SLURM_NODEID", "1"),
            ("SLURM_JOB_NUM_NODES", "4"),
            ("SLURM_JOB_ID", "4242"),
        ]))
        .unwrap();
        assert_eq!(n.source, NodeSource::Slurm);
        assert_eq!(n.name.as_deref(), Some("gpu-n1"));
        assert_eq!((n.rank, n.count), (Some(1), Some(4)));
        assert_eq!(n.describe(), "gpu-n1 (node 2 of 4, slurm job 4242)");
        // SLURM_NNODES stands in for SLURM_JOB_NUM_NODES.
        let n = NodeIdentity::from_scheduler(vars(&[("SLURM_NODEID", "0"), ("SLURM_NNODES", "2")]))
            .unwrap();
        assert_eq!(n.position().as_deref(), Some("node 1 of 2"));
    }

    #[test]
    fn skypilot_gives_rank_count_and_task_and_no_host_name() {
        let n = NodeIdentity::from_scheduler(vars(&[
            ("SKYPILOT_NODE_RANK", "3"),
            ("SKYPILOT_NUM_NODES", "4"),
            ("SKYPILOT_TASK_ID", "sky-2026-12-02-abc_1"),
        ]))
        .unwrap();
        assert_eq!(n.source, NodeSource::Skypilot);
        assert_eq!(n.name, None);
        assert_eq!(n.position().as_deref(), Some("node 4 of 4"));
    }

    #[test]
    fn outside_a_scheduler_nothing_unless_named() {
        assert_eq!(NodeIdentity::resolve(None, vars(&[])), None);
        let n = NodeIdentity::resolve(Some("rack2-a"), vars(&[])).unwrap();
        assert_eq!(n.source, NodeSource::Manual);
        assert_eq!(n.name.as_deref(), Some("rack2-a"));
        // --node renames a scheduler's node and keeps its rank.
        let n = NodeIdentity::resolve(
            Some("a"),
            vars(&[("SLURM_NODEID", "2"), ("SLURM_JOB_NUM_NODES", "4")]),
        )
        .unwrap();
        assert_eq!((n.name.as_deref(), n.rank), (Some("a"), Some(2)));
    }

    #[test]
    fn odd_values_are_dropped_not_copied() {
        let n = NodeIdentity::from_scheduler(vars(&[
            ("SLURMD_NODENAME", "<script>x</script>"),
            ("SLURM_NODEID", "one"),
            ("SLURM_JOB_ID", "12 34"),
        ]))
        .unwrap();
        assert_eq!((n.name, n.rank, n.job_id), (None, None, None));
        assert!(parse_node_name("a/b").is_err());
        assert!(parse_node_name(&"x".repeat(200)).is_err());
        assert_eq!(parse_node_name("n-1.rack:2"), Ok("n-1.rack:2".to_string()));
    }
}

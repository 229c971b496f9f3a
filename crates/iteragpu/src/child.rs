//! A `measure` started by `sweep` knows it: the sweep names itself in [`PARENT_ENV`] (the
//! measure then draws no progress bar of its own). That it dies with the sweep, even one killed
//! with SIGKILL, is `lab_child`'s supervisor's doing, as for every process iteragpu starts.

/// The environment variable through which `sweep` passes its process id to its children.
pub const PARENT_ENV: &str = "ITERAGPU_SWEEP_PARENT";

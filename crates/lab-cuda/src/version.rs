//! Version numbers as the CUDA libraries encode them, decoded for people.

/// A CUDA version integer (`cuDriverGetVersion`, `nvmlSystemGetCudaDriverVersion`): 1000 × major
/// + 10 × minor, so 12080 is 12.8 and 13000 is 13.0.
pub fn cuda_version(encoded: i32) -> String {
    format!("{}.{}", encoded / 1000, (encoded % 1000) / 10)
}

/// The oldest CUDA driver API this tool supports: 12.0 (R525 drivers).
pub const MIN_DRIVER_VERSION: i32 = 12000;

/// A library version from its three `libraryPropertyType` parts.
pub fn triple(major: i32, minor: i32, patch: i32) -> String {
    format!("{major}.{minor}.{patch}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_driver_versions() {
        assert_eq!(cuda_version(12080), "12.8");
        assert_eq!(cuda_version(12000), "12.0");
        assert_eq!(cuda_version(13000), "13.0");
        assert_eq!(cuda_version(11040), "11.4");
        assert_eq!(cuda_version(12090), "12.9");
        assert_eq!(triple(12, 8, 4), "12.8.4");
    }
}

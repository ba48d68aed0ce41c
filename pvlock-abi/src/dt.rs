//! Device-tree properties the hypervisor adds to a VM's own device tree
//! beyond the standard bindings. Standard properties (memory, cpus, psci,
//! the GIC, timer and UART nodes) follow the Linux bindings and are not
//! listed here.

/// `/chosen/pvlock,reset-count` (`<u32>`): how many times the VM has been
/// restarted with PSCI SYSTEM_RESET / SYSTEM_RESET2 since it was created;
/// 0 on the first boot. Guests may ignore it (Linux does); the project's
/// test guests use it to tell a restart from the first boot, since the
/// VM's memory is reloaded from scratch on reset.
pub const RESET_COUNT: &str = "pvlock,reset-count";

#[cfg(test)]
mod tests {
    #[test]
    fn vendor_prefixed_property_name() {
        // Devicetree Specification 2.2.4: "vendor,name" for non-standard properties.
        assert_eq!(super::RESET_COUNT, "pvlock,reset-count");
        assert!(super::RESET_COUNT.contains(','));
    }
}

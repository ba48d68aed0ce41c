//! Device-tree names the hypervisor adds to a VM's own device tree
//! beyond the standard bindings. Standard properties (memory, cpus, psci,
//! the GIC, timer and UART nodes, `/reserved-memory` and its `reg` and
//! `no-map`) follow the Linux bindings and are not listed here.

/// `/chosen/pvlock,reset-count` (`<u32>`): how many times the VM has been
/// restarted with PSCI SYSTEM_RESET / SYSTEM_RESET2 since it was created;
/// 0 on the first boot. Guests may ignore it (Linux does); the project's
/// test guests use it to tell a restart from the first boot, since the
/// VM's memory is reloaded from scratch on reset.
pub const RESET_COUNT: &str = "pvlock,reset-count";

/// Node name (without the `@unit-address`) of the `/reserved-memory`
/// child that covers the VM's PV area: `/reserved-memory/pvlock@<IPA>`.
///
/// The PV area is the part of guest RAM where the hypervisor keeps the
/// per-vCPU records it hands out by IPA — the PV-lock
/// [`VcpuState64`](crate::pvlock::VcpuState64) records of the variants
/// that do not let the guest allocate them (seed v2, seed v3) and the PV
/// time [`StolenTime`](crate::pvtime::StolenTime) records. The node has
/// `reg` = the area and `no-map`
/// (reserved-memory/reserved-memory.yaml), so the guest never allocates
/// those pages; it maps each record itself when a hypercall returns its
/// IPA (Linux: `memremap(..., MEMREMAP_WB)`).
pub const PV_AREA_NODE: &str = "pvlock";

/// `compatible` of the [`PV_AREA_NODE`] node. Guests need not look at it
/// (the records' addresses come from hypercalls); it says whose the
/// memory is.
pub const PV_AREA_COMPATIBLE: &str = "pvlock,pv-area";

#[cfg(test)]
mod tests {
    #[test]
    fn vendor_prefixed_property_name() {
        // Devicetree Specification 2.2.4: "vendor,name" for non-standard properties.
        assert_eq!(super::RESET_COUNT, "pvlock,reset-count");
        assert!(super::RESET_COUNT.contains(','));
        assert_eq!(super::PV_AREA_COMPATIBLE, "pvlock,pv-area");
        assert!(super::PV_AREA_COMPATIBLE.contains(','));
        // A bare node name, the unit address is added (DT spec 2.2.1).
        assert_eq!(super::PV_AREA_NODE, "pvlock");
        assert!(!super::PV_AREA_NODE.contains(['@', '/']));
    }
}

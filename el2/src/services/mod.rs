//! The services a guest calls: the SMCCC dispatcher with PSCI, the KVM
//! vendor calls and the PV services ([`smccc`]), the PV-lock and
//! stolen-time records and when their values change ([`pv`]), and the time
//! of day for KVM PTP ([`wallclock`]). They decide answers and requests;
//! the runner (`crate::run`) carries the requests out.

pub mod pv;
pub mod smccc;
pub mod wallclock;

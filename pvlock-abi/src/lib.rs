//! Every guest-visible number and layout of the hypervisor.
//!
//! This crate is the single place that holds SMCCC / PSCI function IDs,
//! return codes, the KVM vendor UID and feature bits, and the paravirtual
//! shared structures. The hypervisor (`el2`) and the guest driver both use
//! it; nothing else restates a number. Each item cites the specification it
//! comes from (by section title, since Arm renumbers sections between
//! issues) and the project's `docs/abi.md` section.
//!
//! | module | contents | spec |
//! |---|---|---|
//! | [`smccc`] | [`FunctionId`], [`Owner`](smccc::Owner), return codes, [`Version`](smccc::Version), general queries, register rules | Arm DEN0028 (SMCCC) |
//! | [`arch`] | SMCCC_VERSION, SMCCC_ARCH_FEATURES, SOC_ID, workarounds | DEN0028 "Arm Architecture Calls" |
//! | [`kvm`] | vendor Call UID, KVM_FEATURES, KVM_PTP, feature bits, [`KvmFeatures`](kvm::KvmFeatures) | Linux KVM hypercalls.rst |
//! | [`pvlock`] | the PV-lock variants and their per-vCPU structures (with the project's `lock_count` extension) | seed series, openEuler, Anolis (docs/abi.md §3) |
//! | [`directed_yield`] | the project's PV_SCHED_YIELD_TO call | docs/abi.md §6 (`kvm_vcpu_on_spin`); x86 KVM_HC_SCHED_YIELD |
//! | [`control`] | the project's control-VM call PVLOCK_SET_WFX_POLICY (per-vCPU WFE trap policy) | docs/abi.md §6 (`wfe_trap_policy`); x86 per-vCPU KVM_CAP_X86_DISABLE_EXITS |
//! | [`pvtime`] | PV_TIME_FEATURES, PV_TIME_ST, [`StolenTime`](pvtime::StolenTime) | Arm DEN0057A |
//! | [`psci`] | PSCI function IDs, errors, answers | Arm DEN0022 |
//! | [`virt`] | QEMU `virt`'s fixed addresses and interrupts that guests hard-code (RAM, GICv3 distributor and redistributors, PL011 and its clock; the PL011's SPI, the timer and PMU PPIs) | QEMU hw/arm/virt.c; Arm IHI 0069 (INTIDs) |
//! | [`virtio_mmio`] | QEMU `virt`'s virtio-mmio window every VM has, its register map and what an empty transport reads | OASIS virtio 1.2 §4.2.2 |
//! | [`catalog`] | [`describe`]: the name of every id above | — |
//!
//! All shared structures are `#[repr(C, align(64))]`, 64 bytes, with
//! compile-time size/alignment/offset assertions, and hold atomics so that
//! host and guest can access them concurrently (single-copy atomic,
//! little-endian).

#![cfg_attr(not(test), no_std)]
#![warn(missing_docs)]

pub mod arch;
pub mod catalog;
pub mod control;
pub mod directed_yield;
pub mod dt;
pub mod kvm;
pub mod psci;
pub mod pvlock;
pub mod pvtime;
pub mod smccc;
pub mod virt;
pub mod virtio_mmio;

pub use catalog::describe;
pub use smccc::FunctionId;

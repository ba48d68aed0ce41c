//! Allocation failures while creating a VM are errors, never aborts, and
//! leave nothing behind (`el2::memory::heap`).
//!
//! This program installs `el2::memory::heap::TransactionalHeap` as its global
//! allocator (so it runs without libtest's harness, whose own threads would
//! disturb the heap figures) and builds every portable part of the largest
//! VM the binding allows, the way `el2`'s VM creation does, once per
//! allocation it makes:
//! - with just that allocation refused (fault injection, like failslab),
//! - with that and every later allocation refused (an exhausted heap).
//!
//! Each run must report the refusal (`Transaction::failed`), and once its
//! result is dropped the heap must be exactly as before. The exhausted
//! runs measure how much the reserve must hold: `el2`'s reserve (2 MiB,
//! arch/heap.rs) must exceed it with room to spare. Finally, the scheduler
//! entries of a VM, once `Scheduler::reserve_vm` made room for them, are
//! added and filled (every vCPU blocked with a wake-up deadline) without a
//! single allocation: no guest action makes the scheduler allocate.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};

use el2::devices::vgic::VGic;
use el2::guest::layout::{self, GuestLayout, plan};
use el2::guest::{VmError, dt};
use el2::memory::heap::{HeapUsage, TransactionalHeap};
use el2::sched::onspin::{VmSpin, WfxPolicies};
use el2::sched::{CpuSet, InitialState, PutOutcome, PutReason, Scheduler};
use el2::services::pv::PvRegistry;
use el2::services::smccc::{CpuVulnerabilities, Dispatcher, VmServices, dispatcher_for};
use platform::vm::MAX_VCPUS;
use platform::{MemRange, VmConfig};

const MAIN_SIZE: usize = 64 << 20;
/// As in el2's arch/heap.rs.
const RESERVE_SIZE: usize = 2 << 20;

fn thread_id() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    std::thread_local!(static ID: usize = NEXT.fetch_add(1, Ordering::Relaxed));
    ID.with(|id| *id)
}

static HEAP: TransactionalHeap<32> = TransactionalHeap::new(thread_id);

#[repr(C, align(4096))]
struct Area<const N: usize>([u8; N]);

static mut MAIN_AREA: Area<MAIN_SIZE> = Area([0; MAIN_SIZE]);
static mut RESERVE_AREA: Area<RESERVE_SIZE> = Area([0; RESERVE_SIZE]);

/// `HEAP`, given its memory on first use (the Rust runtime may allocate
/// before `main`).
struct LazyHeap;

static HEAP_READY: Once = Once::new();

// SAFETY: forwards to HEAP, which is initialised before its first use.
unsafe impl GlobalAlloc for LazyHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HEAP_READY.call_once(|| {
            // SAFETY: the two areas are used by nothing but HEAP, live
            // forever and are disjoint; this runs once, before HEAP's
            // first allocation.
            unsafe {
                HEAP.init(
                    ((&raw mut MAIN_AREA) as usize, MAIN_SIZE),
                    ((&raw mut RESERVE_AREA) as usize, RESERVE_SIZE),
                )
            }
        });
        // SAFETY: per GlobalAlloc.
        unsafe { HEAP.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: per GlobalAlloc; every block came from HEAP.
        unsafe { HEAP.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: LazyHeap = LazyHeap;

/// Every portable part of one VM, as el2's `build_vm` makes them.
#[allow(dead_code)] // held only to be dropped
struct Built {
    config: VmConfig,
    layout: GuestLayout,
    dtb: Vec<u8>,
    pv: Arc<PvRegistry>,
    dispatcher: Dispatcher,
    vgic: VGic,
    spin: VmSpin,
    wfx: WfxPolicies,
    reset_dtb: Vec<u8>,
}

fn build(config: &VmConfig) -> Result<Built, String> {
    let text = |e: VmError| e.to_string();
    let layout = plan(config, &[]).map_err(text)?;
    let dtb = dt::build(config, &layout, 0, true).map_err(text)?;
    let services = VmServices::from_config(config);
    let vcpus = u16::try_from(layout.vcpus).map_err(|e| e.to_string())?;
    let pv =
        Arc::new(PvRegistry::new(vcpus, services.pv, layout.pv_area).map_err(|e| e.to_string())?);
    let dispatcher = dispatcher_for(services, pv.clone(), CpuVulnerabilities::VULNERABLE)
        .map_err(|e| e.to_string())?;
    let vgic =
        VGic::new(vcpus, 32, |i| layout::vcpu_mpidr(i).value()).map_err(|e| e.to_string())?;
    let mut spin = VmSpin::new(vcpus);
    spin.set_boost(config.boost);
    let wfx = WfxPolicies::from_config(config);
    // What a reset rebuilds.
    let reset_dtb = dt::build(config, &layout, 1, true).map_err(text)?;
    Ok(Built {
        config: config.clone(),
        layout,
        dtb,
        pv,
        dispatcher,
        vgic,
        spin,
        wfx,
        reset_dtb,
    })
}

/// The largest VM: every vCPU, every service, an initrd, long bootargs.
fn largest_vm() -> VmConfig {
    let mut config = VmConfig::new(
        "/chosen/vm@7",
        "largest",
        MAX_VCPUS,
        1 << 30,
        MemRange::new(0x4800_0000, 0x200_0000),
    );
    config.initrd = Some(MemRange::new(0x4c00_0000, 0x40_0000));
    config.bootargs = "console=ttyAMA0 earlycon ".repeat(40);
    config.pv_time = true;
    config.kvm_ptp = true;
    config.control = true;
    config
}

/// Builds `config` refusing allocation `n` (and, if `exhausted`, every
/// later one); returns whether the build was refused memory, and how much
/// of the reserve it held at its end.
fn attempt(config: &VmConfig, n: u64, exhausted: bool, before: HeapUsage) -> (bool, usize) {
    let txn = if exhausted {
        HEAP.begin_exhausted_at(n)
    } else {
        HEAP.begin_failing_at(n)
    };
    let built = build(config);
    let refused = txn.failed();
    let reserve_held = HEAP.usage().reserve;
    if !refused {
        assert!(built.is_ok(), "n={n}: {:?}", built.err());
    }
    drop(built);
    drop(txn);
    assert_eq!(
        HEAP.usage(),
        before,
        "n={n} exhausted={exhausted}: the heap is not as it was"
    );
    (refused, reserve_held)
}

fn creation_fails_cleanly_at_every_allocation() {
    let config = largest_vm();
    let before = HEAP.usage();
    let mut points = 0;
    let mut worst_reserve = 0;
    for exhausted in [false, true] {
        let mut n = 0;
        loop {
            let (refused, reserve_held) = attempt(&config, n, exhausted, before);
            if !refused {
                break;
            }
            worst_reserve = worst_reserve.max(reserve_held);
            n += 1;
        }
        assert!(n > 20, "a 64-vCPU VM makes more than {n} allocations");
        if exhausted {
            assert_eq!(n, points, "both sweeps see the same allocations");
        }
        points = n;
    }
    assert!(
        worst_reserve <= RESERVE_SIZE / 4,
        "an exhausted heap needs {worst_reserve} bytes of reserve to finish the build"
    );
    println!(
        "vm creation: {points} allocation points, each refusal reported and undone; \
         the reserve held at most {worst_reserve} bytes"
    );
}

fn scheduler_entries_cost_no_allocation_once_reserved() {
    let pcpus = 4;
    let vcpus = MAX_VCPUS as usize;
    let mut sched = Scheduler::new(CpuSet::first_n(pcpus), 1000);
    sched.reserve_vm(vcpus).expect("room");
    let txn = HEAP.begin_failing_at(0);
    let vm = sched.add_vm(el2::sched::DEFAULT_WEIGHT).expect("vm");
    for _ in 0..vcpus {
        sched
            .add_vcpu(vm, None, InitialState::Runnable, 0)
            .expect("vcpu");
    }
    let mut blocked = 0;
    let mut now = 10;
    while blocked < vcpus {
        for pcpu in 0..pcpus {
            if let Some(v) = sched.pick_next(pcpu, now) {
                let deadline = Some(now + 1_000_000 + blocked as u64);
                let outcome = sched.put(v, pcpu, now, PutReason::Wfi { deadline });
                assert_eq!(outcome, Ok(PutOutcome::Blocked));
                blocked += 1;
            }
        }
        now += 1;
        assert!(now < 10_000, "only {blocked} of {vcpus} vCPUs ran");
    }
    assert_eq!(
        txn.allocations(),
        0,
        "the scheduler allocated after reserve_vm"
    );
    drop(txn);
    println!("scheduler: {vcpus} vCPUs added and blocked with deadlines, no allocation");
}

fn main() {
    creation_fails_cleanly_at_every_allocation();
    scheduler_entries_cost_no_allocation_once_reserved();
}

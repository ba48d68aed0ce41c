//! Booting el2 through UEFI firmware (`--uefi`, `--uefi-dt`) and the boot
//! tests that do.
//!
//! el2's image is also an EFI application (el2/src/arch/head.rs). Under
//! QEMU the firmware is Debian's AAVMF (edk2's ArmVirtQemu, package
//! `qemu-efi-aarch64`) in the two flash banks; with a fresh variable store
//! it boots the default file of every disk it finds,
//! `\EFI\BOOT\BOOTAA64.EFI` (UEFI 2.10 section 3.5.1.1). [`prepare`] makes
//! that disk from a directory (QEMU's vvfat):
//!
//! ```text
//! EFI/BOOT/BOOTAA64.EFI      el2's image
//! EFI/pvlock/vms.dtb         the VM description (below)
//! EFI/pvlock/smp-demo.img    each payload file, once
//! ```
//!
//! `vms.dtb` is the device tree el2's EFI entry reads
//! (el2/src/bringup/efi/vmdesc.rs): `/chosen/bootargs` (el2's command line,
//! `--append`) and one `pvlock,vm` node per VM with the same properties
//! the device-tree boot writes (`vm.rs`), except that the payloads are
//! named by file, `kernel-file` and `initrd-file`, instead of by address:
//! the EFI entry loads them and puts their addresses in.
//!
//! With ACPI on (QEMU's default) edk2 installs ACPI tables and no device
//! tree, so el2 builds its platform from ACPI; `--uefi-dt` adds
//! `-machine acpi=off`, and edk2 hands on QEMU's device tree instead.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, ensure};

use crate::boottest::{self, BootTest, Check, Kernel, Outcome};
use crate::guests::{self, Guests};
use crate::qemu::{Machine, Uefi};
use crate::setup::AAVMF_VARS;
use crate::vm::{Payload, Value, VmConfig, VmNode};

/// Where the firmware looks for the boot file, from the partition's root.
pub const BOOT_FILE: &[&str] = &["EFI", "BOOT", "BOOTAA64.EFI"];
/// The directory of el2's files on the partition.
pub const PVLOCK_DIR: &[&str] = &["EFI", "pvlock"];
/// The VM description's file name there (el2's `vmdesc::PATH`).
pub const VMS_FILE: &str = "vms.dtb";
/// el2's image when the UEFI Shell starts it ([`Uefi::shell_args`]).
pub const SHELL_IMAGE: &str = "el2.efi";
/// The script the UEFI Shell runs when it starts (UEFI Shell 2.2 section
/// 3.5, "Startup Script"), from the partition's root.
const STARTUP_SCRIPT: &str = "startup.nsh";

/// The VM description: `/chosen` with `bootargs` and the VM nodes
/// (docs/vm-binding.md, payloads by file).
pub fn vm_description(bootargs: &str, vms: &[VmNode]) -> Result<Vec<u8>> {
    let fdt = |e: vm_fdt::Error| anyhow::anyhow!("cannot write the VM description: {e}");
    let mut w = vm_fdt::FdtWriter::new().map_err(fdt)?;
    let root = w.begin_node("").map_err(fdt)?;
    let chosen = w.begin_node("chosen").map_err(fdt)?;
    w.property_string("bootargs", bootargs).map_err(fdt)?;
    for vm in vms {
        let node = w.begin_node(&format!("vm@{}", vm.index)).map_err(fdt)?;
        for (name, value) in vm.properties() {
            match value {
                Value::Str(text) => w.property_string(name, text),
                Value::U32(v) => w.property_u32(name, v),
                Value::U32s(list) => w.property_array_u32(name, list),
                Value::U64s(values) => w.property_array_u64(name, &values),
            }
            .map_err(fdt)?;
        }
        w.end_node(node).map_err(fdt)?;
    }
    w.end_node(chosen).map_err(fdt)?;
    w.end_node(root).map_err(fdt)?;
    w.finish().map_err(fdt)
}

/// A path on the partition, as the firmware spells it.
fn esp_path(parts: &[&str]) -> String {
    parts.iter().map(|p| format!("\\{p}")).collect()
}

/// The payload files of the partition: each source file once, under a
/// FAT-friendly name unique on the partition.
#[derive(Default)]
struct Payloads {
    /// (source, name on the partition)
    files: Vec<(PathBuf, String)>,
}

impl Payloads {
    /// The partition path of `source`, added if new. Built guests are
    /// `<name>.img`; other files keep their name, made unique.
    fn add(&mut self, source: &Path, preferred: Option<&str>) -> String {
        if let Some((_, name)) = self.files.iter().find(|(s, _)| s == source) {
            return esp_path(&[PVLOCK_DIR[0], PVLOCK_DIR[1], name]);
        }
        let base = preferred.map_or_else(
            || {
                source
                    .file_name()
                    .map_or_else(|| "payload".into(), |n| n.to_string_lossy().into_owned())
            },
            |p| format!("{p}.img"),
        );
        let clean: String = base
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let mut name = clean.clone();
        let mut n = 1;
        while name.eq_ignore_ascii_case(VMS_FILE)
            || self
                .files
                .iter()
                .any(|(_, f)| f.eq_ignore_ascii_case(&name))
        {
            name = format!("{n}-{clean}");
            n += 1;
        }
        self.files.push((source.to_path_buf(), name.clone()));
        esp_path(&[PVLOCK_DIR[0], PVLOCK_DIR[1], &name])
    }
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    fs::copy(from, to)
        .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
    Ok(())
}

/// Makes the EFI system partition in `dir/esp` (el2's image, the VM
/// description of `vms`, their payloads) and a writable copy of the
/// firmware's variable store in `dir/vars.fd`, and points `machine` at
/// them. el2's command line is `machine.append`. Returns a line per VM for
/// the terminal.
pub fn prepare(
    machine: &mut Machine,
    el2_image: &Path,
    guests: &Guests,
    vms: &[VmConfig],
    dir: &Path,
) -> Result<Vec<String>> {
    let uefi = machine
        .uefi
        .as_mut()
        .context("internal error: not a UEFI machine")?;
    let head =
        fs::read(el2_image).with_context(|| format!("cannot read {}", el2_image.display()))?;
    ensure!(
        head.starts_with(b"MZ"),
        "{} is not an EFI application (no \"MZ\" at its start): an el2 built before its \
         image had a PE/COFF header cannot boot through UEFI",
        el2_image.display()
    );
    let esp = dir.join("esp");
    if esp.exists() {
        fs::remove_dir_all(&esp).with_context(|| format!("cannot remove {}", esp.display()))?;
    }
    let boot_dir = esp.join(BOOT_FILE[0]).join(BOOT_FILE[1]);
    let pvlock_dir = esp.join(PVLOCK_DIR[0]).join(PVLOCK_DIR[1]);
    for d in [&boot_dir, &pvlock_dir] {
        fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    match &uefi.shell_args {
        // No default boot file: the firmware's boot manager falls back to
        // its UEFI Shell, which runs startup.nsh, which starts el2 with the
        // arguments as its load options (the Shell passes the whole
        // command line, program first).
        Some(args) => {
            ensure!(
                !args.chars().any(char::is_control),
                "the shell arguments must be one line"
            );
            copy(el2_image, &pvlock_dir.join(SHELL_IMAGE))?;
            let command = format!(
                "FS0:{} {args}\r\n",
                esp_path(&[PVLOCK_DIR[0], PVLOCK_DIR[1], SHELL_IMAGE])
            );
            let script = esp.join(STARTUP_SCRIPT);
            fs::write(&script, command)
                .with_context(|| format!("cannot write {}", script.display()))?;
        }
        None => copy(el2_image, &boot_dir.join(BOOT_FILE[2]))?,
    }

    let mut payloads = Payloads::default();
    let mut nodes = Vec::new();
    for config in vms {
        config.validate()?;
        let kernel = guests::resolve(guests, &config.guest)?;
        let built = guests::GUESTS.iter().find(|g| **g == config.guest).copied();
        let kernel_file = payloads.add(&kernel, built);
        let initrd_file = match &config.initrd {
            Some(path) => {
                ensure!(path.is_file(), "--initrd {}: no such file", path.display());
                Some(payloads.add(path, None))
            }
            None => None,
        };
        for _ in 0..config.count {
            let index = nodes.len();
            nodes.push(VmNode {
                index,
                name: format!("vm{index}"),
                vcpus: config.vcpus,
                memory: config.memory,
                kernel: Payload::File(kernel_file.clone()),
                initrd: initrd_file.clone().map(Payload::File),
                bootargs: config.bootargs.clone(),
                affinity: config.affinity.clone(),
                pv_lock: config.pv_lock,
                pv_time: config.pv_time,
                boost: config.boost,
                kvm_ptp: config.kvm_ptp,
                control: config.control,
                cpu_weight: config.cpu_weight,
                time_slice_us: config.time_slice_us,
            });
        }
    }
    for (index, (source, name)) in payloads.files.iter().enumerate() {
        // The fault the bad-input boot test asks for: the description
        // names the first kernel, the partition does not have it.
        if index == 0 && uefi.missing_kernel {
            continue;
        }
        copy(source, &pvlock_dir.join(name))?;
    }
    let description = vm_description(machine.append.as_deref().unwrap_or(""), &nodes)?;
    let vms_path = pvlock_dir.join(VMS_FILE);
    fs::write(&vms_path, description)
        .with_context(|| format!("cannot write {}", vms_path.display()))?;

    let vars = dir.join("vars.fd");
    copy(Path::new(AAVMF_VARS), &vars)?;
    uefi.esp = Some(esp.clone());
    uefi.vars = Some(vars);

    let mut notes = vec![format!(
        "EFI system partition {} (\\EFI\\BOOT\\BOOTAA64.EFI = el2, \\EFI\\pvlock\\{VMS_FILE}), firmware {}",
        esp.display(),
        if uefi.device_tree {
            "with its device tree (acpi=off)"
        } else {
            "with ACPI"
        }
    )];
    for n in &nodes {
        let mut line = format!(
            "{}: {} vCPUs, {} MiB, kernel {}",
            n.name,
            n.vcpus,
            n.memory >> 20,
            n.kernel
        );
        if let Some(initrd) = &n.initrd {
            line += &format!(", initrd {initrd}");
        }
        if !n.bootargs.is_empty() {
            line += &format!(", bootargs \"{}\"", n.bootargs);
        }
        notes.push(line);
    }
    Ok(notes)
}

/// What the firmware prints when the application it started returned an
/// error (edk2's boot manager); the bad-input test stops QEMU there.
pub const BOOT_FAILED: &str = "BdsDxe: failed to start Boot";

/// Hard timeout of a UEFI boot test. Measured on the 2-core machine with
/// QEMU 7.2: the firmware takes about 10 s to reach the boot file, el2
/// and the smp-demo VM about 2 s more.
const TIMEOUT: Duration = Duration::from_secs(120);

/// The smp-demo VM of the UEFI tests.
fn demo_vm() -> VmConfig {
    VmConfig::smp_demo(4, boottest::DEMO_BOOTARGS, 1)
}

fn uefi_machine(device_tree: bool, missing_kernel: bool) -> Machine {
    Machine {
        smp: 4,
        uefi: Some(Uefi {
            device_tree,
            missing_kernel,
            ..Uefi::default()
        }),
        ..Machine::default()
    }
}

/// el2's command line in the VM description of the load-options test,
/// and the one its load options give instead.
const DESCRIPTION_BOOTARGS: &str = "loglevel=info";
const LOAD_OPTIONS: &str = "loglevel=debug el2.tick_check_ms=0";

/// el2 started from the UEFI Shell with arguments: its load options
/// replace the VM description's `/chosen/bootargs` (the Shell passes the
/// program's own path first, which el2 drops); debug messages show and
/// the tick check is skipped, which the description's command line would
/// not do. The Shell waits 5 s before its startup script.
fn load_options_test() -> BootTest {
    let mut machine = uefi_machine(false, false);
    machine.append = Some(DESCRIPTION_BOOTARGS.into());
    if let Some(uefi) = &mut machine.uefi {
        uefi.shell_args = Some(LOAD_OPTIONS.into());
    }
    let mut checks = vec![
        Check::Line(
            "el2: UEFI: command line from the load options: \"loglevel=debug el2.tick_check_ms=0\"",
        ),
        Check::Line("platform: ACPI tables ("),
        Check::Line("[DEBUG cpu0] map "),
        Check::Lines {
            text: "tick: cpu ".into(),
            count: 0,
        },
        Check::SmpOnline(4),
    ];
    checks.extend(boottest::demo_checks(4, boottest::DEMO_ROUNDS, 1));
    BootTest {
        name: format!("uefi load-options smp-demo {}", machine.describe()),
        timeout: TIMEOUT,
        outcome: Outcome::CleanExit,
        checks,
        dt_edit: None,
        kernel: Kernel::El2,
        vms: vec![demo_vm()],
        machine,
    }
}

/// el2 booted as an EFI application running one smp-demo VM on 4 pCPUs,
/// the platform from ACPI (`device_tree` false) or from the firmware's
/// device tree.
fn demo_test(device_tree: bool) -> BootTest {
    let machine = uefi_machine(device_tree, false);
    let mut checks = vec![
        Check::Line("el2: pvlock hypervisor v"),
        Check::Line(" (UEFI entry)"),
        Check::Line("el2: UEFI: /chosen/vm@0 kernel-file: \\EFI\\pvlock\\smp-demo.img"),
        Check::Line("; leaving boot services"),
        Check::Line(if device_tree {
            "platform: firmware device tree and UEFI memory map from the UEFI handoff block"
        } else {
            "platform: ACPI tables ("
        }),
        Check::Banner,
        Check::SmpOnline(4),
    ];
    checks.extend(boottest::demo_checks(4, boottest::DEMO_ROUNDS, 1));
    checks.push(Check::HypervisorSummary {
        vcpus_per_vm: vec![4],
        time_sliced: false,
    });
    BootTest {
        name: format!(
            "uefi {} smp-demo {}",
            if device_tree { "dt" } else { "acpi" },
            machine.describe()
        ),
        timeout: TIMEOUT,
        outcome: Outcome::CleanExit,
        checks,
        dt_edit: None,
        kernel: Kernel::El2,
        vms: vec![demo_vm()],
        machine,
    }
}

/// The VM description names a kernel file the partition lacks: the EFI
/// entry says which file of which node and property, and returns the
/// error to the firmware, whose boot manager reports that the boot option
/// failed (and would go on to its shell; xtask stops QEMU there). el2
/// itself never starts.
fn missing_kernel_test() -> BootTest {
    firmware_carries_on(
        "missing-kernel-file",
        uefi_machine(false, true),
        Outcome::StopsAt(BOOT_FAILED),
        &[
            "el2: UEFI: error: \\EFI\\pvlock\\vms.dtb: node /chosen/vm@0, property \
             \"kernel-file\": \\EFI\\pvlock\\smp-demo.img: cannot open it: EFI_NOT_FOUND",
            "): Not Found",
        ],
    )
}

/// A panic in the UEFI stage (`el2.selftest=uefi-panic`, before
/// ExitBootServices, where el2 has no console of its own yet) is reported
/// on the firmware's console and the image returns `EFI_ABORTED`; the
/// firmware's boot manager carries on. el2 proper never starts.
fn uefi_panic_test() -> BootTest {
    let mut machine = uefi_machine(false, false);
    machine.append = Some("el2.selftest=uefi-panic".into());
    firmware_carries_on(
        "selftest=uefi-panic",
        machine,
        Outcome::FatalThenStopsAt(BOOT_FAILED),
        &[
            "EL2 FATAL: panic in the UEFI stage: ",
            "selftest: el2.selftest=uefi-panic",
            "): Aborted",
        ],
    )
}

/// A test in which the EFI stage gives up and returns to the firmware:
/// each of `lines` shows, el2's own banner never does, and `outcome` says
/// how the run ends.
fn firmware_carries_on(
    what: &str,
    machine: Machine,
    outcome: Outcome,
    lines: &[&'static str],
) -> BootTest {
    let mut checks: Vec<Check> = lines.iter().map(|&line| Check::Line(line)).collect();
    checks.push(Check::Lines {
        text: " at EL2 on ".into(),
        count: 0,
    });
    BootTest {
        name: format!("uefi {what} {}", machine.describe()),
        timeout: TIMEOUT,
        outcome,
        checks,
        dt_edit: None,
        kernel: Kernel::El2,
        vms: vec![demo_vm()],
        machine,
    }
}

/// The UEFI boot tests.
pub fn tests() -> Vec<BootTest> {
    vec![
        demo_test(false),
        demo_test(true),
        missing_kernel_test(),
        load_options_test(),
        uefi_panic_test(),
    ]
}

/// Whether `t` boots through UEFI.
pub fn needs_firmware(t: &BootTest) -> bool {
    t.machine.uefi.is_some()
}

/// The directory a boot test's partition goes in.
pub fn test_dir(logs: &Path, name: &str) -> PathBuf {
    logs.join(format!("{}.uefi", crate::suite::slug(name)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::PvLock;

    fn vm(index: usize) -> VmNode {
        VmNode {
            index,
            name: format!("vm{index}"),
            vcpus: 4,
            memory: 64 << 20,
            kernel: Payload::File("\\EFI\\pvlock\\smp-demo.img".into()),
            initrd: None,
            bootargs: "rounds=3".into(),
            affinity: Vec::new(),
            pv_lock: None,
            pv_time: None,
            boost: None,
            kvm_ptp: None,
            control: None,
            cpu_weight: None,
            time_slice_us: None,
        }
    }

    #[test]
    fn the_vm_description_names_payloads_by_file() {
        let mut second = vm(1);
        second.initrd = Some(Payload::File("\\EFI\\pvlock\\initrd.cpio".into()));
        second.affinity = vec![0, 1];
        second.pv_lock = Some(PvLock::Off);
        second.pv_time = Some(false);
        second.control = Some(true);
        let dtb = vm_description("loglevel=debug", &[vm(0), second]).unwrap();
        let tree = fdt::Fdt::new(&dtb).unwrap();
        let chosen = tree.find_node("/chosen").unwrap();
        assert_eq!(
            chosen.property("bootargs").unwrap().as_str(),
            Some("loglevel=debug")
        );
        let vm0 = tree.find_node("/chosen/vm@0").unwrap();
        let props: Vec<&str> = vm0.properties().map(|p| p.name).collect();
        assert_eq!(
            props,
            [
                "compatible",
                "label",
                "vcpus",
                "memory",
                "kernel-file",
                "bootargs"
            ]
        );
        assert_eq!(
            vm0.property("kernel-file").unwrap().as_str(),
            Some("\\EFI\\pvlock\\smp-demo.img")
        );
        assert_eq!(
            vm0.property("memory").unwrap().value,
            (64u64 << 20).to_be_bytes()
        );
        let vm1 = tree.find_node("/chosen/vm@1").unwrap();
        assert_eq!(
            vm1.property("initrd-file").unwrap().as_str(),
            Some("\\EFI\\pvlock\\initrd.cpio")
        );
        assert_eq!(
            vm1.property("cpu-affinity").unwrap().value,
            [0, 0, 0, 0, 0, 0, 0, 1]
        );
        assert_eq!(vm1.property("pv-lock").unwrap().as_str(), Some("none"));
        assert_eq!(vm1.property("pv-time").unwrap().as_str(), Some("off"));
        assert_eq!(vm1.property("control").unwrap().as_str(), Some("on"));
        assert!(vm1.property("boost").is_none());
    }

    #[test]
    fn payload_names_are_unique_and_fat_friendly() {
        let mut p = Payloads::default();
        assert_eq!(
            p.add(Path::new("/t/release/smp-demo.bin"), Some("smp-demo")),
            "\\EFI\\pvlock\\smp-demo.img"
        );
        // The same file again: the same name.
        assert_eq!(
            p.add(Path::new("/t/release/smp-demo.bin"), Some("smp-demo")),
            "\\EFI\\pvlock\\smp-demo.img"
        );
        assert_eq!(
            p.add(Path::new("/a/initrd image,v2.cpio"), None),
            "\\EFI\\pvlock\\initrd_image_v2.cpio"
        );
        assert_eq!(
            p.add(Path::new("/b/initrd image,v2.cpio"), None),
            "\\EFI\\pvlock\\1-initrd_image_v2.cpio"
        );
        assert_eq!(
            p.add(Path::new("/c/VMS.DTB"), None),
            "\\EFI\\pvlock\\1-VMS.DTB",
            "never the description's own name"
        );
        assert_eq!(esp_path(BOOT_FILE), "\\EFI\\BOOT\\BOOTAA64.EFI");
    }

    #[test]
    fn the_tests_boot_through_uefi() {
        let tests = tests();
        assert!(tests.iter().all(needs_firmware));
        assert_eq!(
            tests.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            [
                "uefi acpi smp-demo max,pauth=off smp=4 uefi",
                "uefi dt smp-demo max,pauth=off smp=4 uefi-dt",
                "uefi missing-kernel-file max,pauth=off smp=4 uefi",
                "uefi load-options smp-demo max,pauth=off smp=4 uefi",
                "uefi selftest=uefi-panic max,pauth=off smp=4 uefi"
            ]
        );
        assert_eq!(tests[2].outcome, Outcome::StopsAt(BOOT_FAILED));
        assert_eq!(tests[4].outcome, Outcome::FatalThenStopsAt(BOOT_FAILED));
    }
}

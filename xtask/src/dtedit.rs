//! Device trees that differ from QEMU's own in deliberate ways: VMs for el2
//! to run (`/chosen/vm@N`, see `vm.rs`), and boards el2 cannot fully use
//! (for boot tests of how it copes).
//!
//! QEMU writes its tree for the exact machine (`-machine dumpdtb=`), `dtc`
//! turns it into source, [`DtEdit`]s change the source, and `dtc` compiles
//! it back; the boot then passes it with `-dtb`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail, ensure};

use crate::qemu::{Console, Machine};
use crate::vm::Plan;

pub const DTC: &str = "dtc";

/// One change to QEMU's device tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DtEdit {
    /// Delete `property` from the node named `node` (e.g. `intc@8000000`).
    RemoveProperty {
        node: &'static str,
        property: &'static str,
    },
    /// Add a CPU node with this MPIDR after the last CPU, one that the
    /// firmware (QEMU) does not have, so PSCI CPU_ON refuses it.
    AddCpu { mpidr: u64 },
    /// Add the plan's `/chosen/vm@N` nodes.
    AddVms(Plan),
}

impl DtEdit {
    /// Applies the edit to device tree source as `dtc -O dts` prints it.
    pub fn apply(&self, dts: &str) -> Result<String> {
        match self {
            DtEdit::RemoveProperty { node, property } => remove_property(dts, node, property),
            DtEdit::AddCpu { mpidr } => add_cpu(dts, *mpidr),
            DtEdit::AddVms(plan) => add_vms(dts, plan),
        }
    }
}

/// Writes QEMU's tree for `machine` with `edits` applied to `dir` and
/// returns its path.
pub fn prepare(machine: &Machine, edits: &[&DtEdit], image: &Path, dir: &Path) -> Result<PathBuf> {
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let original = dir.join("qemu.dtb");
    let edited = dir.join("edited.dtb");
    let dump = Machine {
        dump_dtb: Some(original.clone()),
        dtb: None,
        uboot: false,
        ..machine.clone()
    };
    let output = dump
        .command(image, &Console::File(dir.join("dump-console.log")), false)?
        .stdin(Stdio::null())
        .output()
        .context("cannot run QEMU to dump its device tree")?;
    ensure!(
        output.status.success() && original.is_file(),
        "QEMU could not dump its device tree ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let dts = String::from_utf8(run_dtc(&["-I", "dtb", "-O", "dts"], &original)?)
        .context("dtc printed something that is not UTF-8")?;
    let dts = edits.iter().try_fold(dts, |dts, edit| edit.apply(&dts))?;
    let source = dir.join("edited.dts");
    fs::write(&source, dts).with_context(|| format!("cannot write {}", source.display()))?;
    let dtb = run_dtc(&["-I", "dts", "-O", "dtb"], &source)?;
    fs::write(&edited, dtb).with_context(|| format!("cannot write {}", edited.display()))?;
    Ok(edited)
}

/// Runs `dtc -q ARGS INPUT` and returns what it printed.
fn run_dtc(args: &[&str], input: &Path) -> Result<Vec<u8>> {
    let output = Command::new(DTC)
        .arg("-q")
        .args(args)
        .arg(input)
        .output()
        .context("cannot run dtc")?;
    ensure!(
        output.status.success(),
        "dtc failed on {}: {}",
        input.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(output.stdout)
}

/// The line range `[start, end]` of the node whose header line is
/// `<indent>name {`, end being its `};` line.
fn node_lines(lines: &[&str], name: &str) -> Result<(usize, usize)> {
    let header = format!("{name} {{");
    let start = lines
        .iter()
        .position(|l| l.trim_start() == header)
        .with_context(|| format!("no node {name} in QEMU's device tree"))?;
    let indent = indent_of(lines[start]);
    let end = lines[start + 1..]
        .iter()
        .position(|l| indent_of(l) == indent && l.trim() == "};")
        .map(|i| start + 1 + i)
        .with_context(|| format!("node {name} is not closed"))?;
    Ok((start, end))
}

fn indent_of(line: &str) -> &str {
    &line[..line.len() - line.trim_start().len()]
}

fn remove_property(dts: &str, node: &str, property: &str) -> Result<String> {
    let lines: Vec<&str> = dts.lines().collect();
    let (start, end) = node_lines(&lines, node)?;
    let own_indent = format!("{}\t", indent_of(lines[start]));
    let prefixes = [format!("{property} = "), format!("{property};")];
    let at = (start + 1..end)
        .find(|&i| {
            indent_of(lines[i]) == own_indent
                && prefixes
                    .iter()
                    .any(|p| lines[i].trim_start().starts_with(p))
        })
        .with_context(|| format!("node {node} has no property {property}"))?;
    let mut out: Vec<&str> = lines;
    out.remove(at);
    Ok(out.join("\n") + "\n")
}

fn add_cpu(dts: &str, mpidr: u64) -> Result<String> {
    let lines: Vec<&str> = dts.lines().collect();
    let (cpus_start, cpus_end) = node_lines(&lines, "cpus")?;
    let cpu_indent = format!("{}\t", indent_of(lines[cpus_start]));
    // The `};` closing the last `cpu@...` child of /cpus.
    let mut insert_after = None;
    let mut i = cpus_start + 1;
    while i < cpus_end {
        let line = lines[i];
        if indent_of(line) == cpu_indent && line.trim_start().starts_with("cpu@") {
            let name = line.trim().trim_end_matches('{').trim();
            let (_, end) = node_lines(&lines[i..], name)?;
            insert_after = Some(i + end);
            i += end;
        }
        i += 1;
    }
    let Some(after) = insert_after else {
        bail!("/cpus in QEMU's device tree has no cpu@ node");
    };
    let node = [
        format!("{cpu_indent}cpu@{mpidr:x} {{"),
        format!("{cpu_indent}\tdevice_type = \"cpu\";"),
        format!("{cpu_indent}\tcompatible = \"arm,arm-v8\";"),
        format!("{cpu_indent}\treg = <{mpidr:#x}>;"),
        format!("{cpu_indent}\tenable-method = \"psci\";"),
        format!("{cpu_indent}}};"),
    ];
    let mut out: Vec<String> = lines.iter().map(|l| (*l).to_string()).collect();
    for (k, line) in node.into_iter().enumerate() {
        out.insert(after + 1 + k, line);
    }
    Ok(out.join("\n") + "\n")
}

/// Adds the VM nodes at the end of `/chosen`, creating it if QEMU's tree
/// has none.
fn add_vms(dts: &str, plan: &Plan) -> Result<String> {
    let lines: Vec<&str> = dts.lines().collect();
    let mut out: Vec<String> = Vec::new();
    match node_lines(&lines, "chosen") {
        Ok((start, end)) => {
            let indent = indent_of(lines[start]).len() + 1;
            out.extend(lines[..end].iter().map(|l| (*l).to_string()));
            out.extend(plan.nodes_dts(indent).lines().map(String::from));
            out.extend(lines[end..].iter().map(|l| (*l).to_string()));
        }
        Err(_) => {
            // No /chosen: add one as the root node's last child.
            let root_end = lines
                .iter()
                .rposition(|l| l.trim() == "};" && indent_of(l).is_empty())
                .context("QEMU's device tree source has no root node")?;
            out.extend(lines[..root_end].iter().map(|l| (*l).to_string()));
            out.push("\tchosen {".into());
            out.extend(plan.nodes_dts(2).lines().map(String::from));
            out.push("\t};".into());
            out.extend(lines[root_end..].iter().map(|l| (*l).to_string()));
        }
    }
    Ok(out.join("\n") + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::{Module, Payload, VmNode};

    const DTS: &str = "/dts-v1/;

/ {
\tintc@8000000 {
\t\treg = <0x00 0x8000000 0x00 0x10000>;
\t\tinterrupt-controller;

\t\tits@8080000 {
\t\t\treg = <0x00 0x8080000 0x00 0x20000>;
\t\t};
\t};

\tcpus {
\t\t#size-cells = <0x00>;
\t\t#address-cells = <0x01>;

\t\tcpu-map {
\t\t\tsocket0 {
\t\t\t};
\t\t};

\t\tcpu@0 {
\t\t\treg = <0x00>;
\t\t};

\t\tcpu@1 {
\t\t\treg = <0x01>;
\t\t};
\t};
};
";

    #[test]
    fn removes_only_the_nodes_own_property() {
        let out = DtEdit::RemoveProperty {
            node: "intc@8000000",
            property: "reg",
        }
        .apply(DTS)
        .unwrap();
        assert!(!out.contains("reg = <0x00 0x8000000"));
        assert!(
            out.contains("reg = <0x00 0x8080000"),
            "the ITS child keeps its reg"
        );
        assert!(out.contains("interrupt-controller;"));
    }

    #[test]
    fn missing_node_or_property_is_an_error() {
        let no_node = DtEdit::RemoveProperty {
            node: "intc@9000000",
            property: "reg",
        };
        assert!(no_node.apply(DTS).is_err());
        let no_prop = DtEdit::RemoveProperty {
            node: "intc@8000000",
            property: "ranges",
        };
        assert!(no_prop.apply(DTS).is_err());
    }

    fn one_vm() -> Plan {
        Plan {
            modules: vec![Module {
                path: "/k".into(),
                addr: 0x7bc0_0000,
                size: 0x1000,
            }],
            nodes: vec![VmNode {
                index: 0,
                name: "vm0".into(),
                vcpus: 2,
                memory: 64 << 20,
                kernel: Payload::At {
                    addr: 0x7bc0_0000,
                    size: 0x1000,
                },
                initrd: None,
                bootargs: String::new(),
                affinity: Vec::new(),
                pv_lock: None,
                pv_time: None,
                boost: None,
                kvm_ptp: None,
                control: None,
                cpu_weight: None,
                time_slice_us: None,
            }],
        }
    }

    #[test]
    fn vms_go_at_the_end_of_chosen() {
        let dts = DTS.replace(
            "\tcpus {",
            "\tchosen {\n\t\tstdout-path = \"/pl011@9000000\";\n\t};\n\n\tcpus {",
        );
        let out = DtEdit::AddVms(one_vm()).apply(&dts).unwrap();
        assert!(out.starts_with("/dts-v1/;\n\n/ {\n"), "{out}");
        assert!(
            out.contains(
                "\t\tstdout-path = \"/pl011@9000000\";\n\t\tvm@0 {\n\t\t\tcompatible = \"pvlock,vm\";"
            ),
            "{out}"
        );
        assert!(
            out.contains("\t\t\tbootargs = \"\";\n\t\t};\n\t};\n\n\tcpus {"),
            "{out}"
        );
    }

    #[test]
    fn a_missing_chosen_is_created() {
        let out = DtEdit::AddVms(one_vm()).apply(DTS).unwrap();
        assert!(out.ends_with("\t\t};\n\t};\n\tchosen {\n\t\tvm@0 {\n\t\t\tcompatible = \"pvlock,vm\";\n\t\t\tlabel = \"vm0\";\n\t\t\tvcpus = <2>;\n\t\t\tmemory = <0x0 0x4000000>;\n\t\t\tkernel = <0x0 0x7bc00000 0x0 0x1000>;\n\t\t\tbootargs = \"\";\n\t\t};\n\t};\n};\n"), "{out}");
    }

    #[test]
    fn adds_a_cpu_after_the_last_one() {
        let out = DtEdit::AddCpu { mpidr: 0x100 }.apply(DTS).unwrap();
        let new = out.find("cpu@100 {").expect("new node");
        assert!(new > out.find("cpu@1 {").unwrap());
        assert!(out.contains("\t\t\treg = <0x100>;"));
        assert!(out.contains("\t\t\tenable-method = \"psci\";"));
        // Still inside /cpus: the new node is followed by the close of /cpus.
        assert!(out[new..].contains("\t\t};\n\t};\n};"));
    }
}

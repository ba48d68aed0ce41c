#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| el2::fuzzing::acpi(data));

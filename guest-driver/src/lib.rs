//! What a guest kernel links to use the hypervisor's paravirtual services.
#![cfg_attr(not(test), no_std)]

//! Memory: the hypervisor's own map at EL2 ([`layout`]), its heap and
//! allocation transactions ([`heap`]), and who owns each page of host RAM
//! ([`ownership`]). Plans and bookkeeping; the arch layer applies the map.

pub mod heap;
pub mod layout;
pub mod ownership;

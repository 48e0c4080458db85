//! `burnin gpu`: the health of every GPU — copy matrix, memory bandwidth, a compute
//! burn with clocks and throttling watched, PCIe link and error counters before and
//! after — one rank per GPU under the launcher.
pub mod burn;
pub mod copy;
pub mod nvml;

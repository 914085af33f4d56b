//! Checked mode: GPU kernels compiled from their checked sources ([`crate::CheckedForm`]),
//! each device's fault record, and how a record becomes the host backend's
//! [`Error::Fault`].
//!
//! The record is [`RECORD_WORDS`] words of device memory, bound to every launch of a checked
//! device (eager and recorded, so replays are checked too): `[set, kernel id, target, index,
//! length, …]`. The first out-of-range access of the device writes it; the runtime reads it at
//! [`crate::Device::synchronize`] and at every readback (the same wait), reports it once as
//! `Error::Fault` naming the kernel, the slice or workgroup array, the index and the length,
//! and clears it. Releasing memory (a holder's drain on `clear` or drop) does not report it:
//! the fault stays for the next synchronisation.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::error::{Error, FaultKind, KernelFault, Result};
use crate::kernel::KernelDef;

/// Words in a fault record (as the emitters write it: `graphed_lang`'s `emit::bounds`).
pub(crate) const RECORD_WORDS: usize = 8;

/// How a device is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceOptions {
    /// Checked mode: GPU kernels check every slice and workgroup-array index, and the first
    /// out-of-range access is reported as [`Error::Fault`] at the next synchronisation, never
    /// a wrong result (an out-of-range read gives 0 and a write is dropped until then). The
    /// host backend always checks. Default: `GRAPHED_CHECKED`.
    pub checked: bool,
}

impl DeviceOptions {
    /// The options of devices opened without any: `GRAPHED_CHECKED=1` (or `on`, `true`,
    /// `yes`) is checked mode; `0`, `off`, `false`, `no` or unset is not; anything else is
    /// [`Error::BadEnv`] (an unknown word must not switch checking off unnoticed).
    pub fn from_env() -> Result<DeviceOptions> {
        let checked = match std::env::var("GRAPHED_CHECKED") {
            Err(_) => false,
            Ok(v) => match v.trim().to_ascii_lowercase().as_str() {
                "1" | "on" | "true" | "yes" => true,
                "" | "0" | "off" | "false" | "no" => false,
                _ => {
                    return Err(Error::BadEnv {
                        var: "GRAPHED_CHECKED",
                        value: v,
                        hint: "1 (checked GPU kernels) or 0",
                    })
                }
            },
        };
        Ok(DeviceOptions { checked })
    }
}

/// The kernels a checked device compiled, by fault-record id.
#[derive(Default)]
pub(crate) struct Kernels(Mutex<HashMap<u32, &'static KernelDef>>);

impl Kernels {
    /// Notes a kernel compiled in checked mode.
    pub(crate) fn note(&self, k: &'static KernelDef) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(k.checked.id, k);
    }

    /// The fault a record holds, if any.
    pub(crate) fn fault(&self, record: &[u32]) -> Option<KernelFault> {
        if record.first().copied().unwrap_or(0) == 0 {
            return None;
        }
        let (id, target, index, len) = (record[1], record[2] as usize, record[3], record[4]);
        let kernels = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (kernel, target) = match kernels.get(&id) {
            Some(k) => (
                k.name,
                k.checked.targets.get(target).copied().unwrap_or("?"),
            ),
            // Only kernels this device compiled write its record.
            None => ("(unknown kernel)", "?"),
        };
        Some(KernelFault {
            kernel,
            target,
            kind: FaultKind::OutOfBounds { index, len },
        })
    }

    /// `Ok` for a clear record, else the fault as the error.
    pub(crate) fn check(&self, record: &[u32]) -> Result<()> {
        match self.fault(record) {
            Some(f) => Err(Error::Fault(f)),
            None => Ok(()),
        }
    }
}

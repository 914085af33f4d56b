//! Fault injection hooks for tests (not a stable API).

use std::cell::RefCell;

thread_local! {
    static CAPTURE_FAULT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Makes the next CUDA capture on this thread fail after issuing its ops (other backends
/// have no capture and ignore it).
pub fn inject_capture_fault(reason: &str) {
    CAPTURE_FAULT.with(|c| *c.borrow_mut() = Some(reason.to_string()));
}

#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn take_capture_fault() -> Option<String> {
    CAPTURE_FAULT.with(|c| c.borrow_mut().take())
}

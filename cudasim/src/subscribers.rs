//! The simulator's CUPTI subscribers (a test double of CUPTI's Callback API subscription rules), per release:
//!
//! - Up to 13.4, one subscriber at a time: any second `cuptiSubscribe`/`cuptiSubscribe_v2` fails with
//!   CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED (cupti_callbacks.h: "Only a single subscriber can be
//!   registered at a time"), and `cuptiSubscribe_v2` writes the holder's name into `oldSubscriberName`.
//! - From 13.5, multi-subscriber mode (CUPTI Python 13.5 release notes: "Added support for multi-subscriber mode in
//!   the Activity and Callback APIs. Each subscriber ... receives only the callbacks and user data that it
//!   registered", with new per-subscriber (v2) Activity APIs). Rules, from cupti_callbacks.h and cupti_activity.h
//!   (`allowMultipleSubscribers`, `CUPTI_ACTIVITY_ATTR_MULTIPLE_SUBSCRIBER_STATE`): the first subscriber decides
//!   the mode ("If 2, this option has not been set by a prior subscriber ... free to set it during
//!   cuptiSubscribe_v2"); later ones join only if it allowed several and they ask for it too (a legacy
//!   `cuptiSubscribe` never does); on success `oldSubscriberName` receives the first subscriber's name. CUPTI
//!   names a v2 subscriber `"CUPTI for <subscriberName>"`. Not documented, and modelled as the simplest reading:
//!   the mode is unset again once every subscriber has left. 13.3's notes mention multi-subscriber mode too, but
//!   without the per-subscriber Activity API; the simulator does not model that intermediate state.

use crate::c;
use parking_lot::RwLock;
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicUsize, Ordering};

pub(crate) const MAX_CBID: usize = 1024;
/// At most this many subscribers get a callback dispatched (more than any real process has).
pub(crate) const MAX_DISPATCH: usize = 8;

struct Subscriber {
    handle: usize,
    callback: c::CUpti_CallbackFunc,
    userdata: usize,
    /// `"CUPTI for <subscriberName>"` (v2 with a name), else none.
    name: Option<CString>,
    /// Callbacks enabled, by domain (0 driver, 1 runtime) and cbid.
    enabled: Box<[[bool; MAX_CBID]; 2]>,
}

struct Registry {
    subscribers: Vec<Subscriber>,
    /// The mode the first subscriber chose; None while nobody is subscribed.
    multi: Option<bool>,
}

static REGISTRY: RwLock<Registry> = RwLock::new(Registry { subscribers: Vec::new(), multi: None });
static NEXT_HANDLE: AtomicUsize = AtomicUsize::new(1);

/// What a refused subscriber is told holds CUPTI when the holder gave no name (a legacy subscriber).
pub(crate) const UNNAMED_HOLDER: &CStr = c"CUPTI for cudasim-test-subscriber";

/// Subscribes; Ok(handle), or Err(the name of the subscriber that holds CUPTI). On success with others already
/// there (multi-subscriber mode), also the first subscriber's name.
pub(crate) fn subscribe(
    callback: c::CUpti_CallbackFunc,
    userdata: usize,
    name: Option<&CStr>,
    allow_multi: bool,
) -> Result<(usize, Option<CString>), CString> {
    let multi_supported = crate::release::current().has_multiple_subscribers();
    let mut reg = REGISTRY.write();
    let first_name = || reg.subscribers.first().map(|s| s.name.clone().unwrap_or_else(|| UNNAMED_HOLDER.to_owned()));
    let joined = if reg.subscribers.is_empty() {
        None
    } else if multi_supported && allow_multi && reg.multi == Some(true) {
        first_name()
    } else {
        return Err(first_name().unwrap_or_else(|| UNNAMED_HOLDER.to_owned()));
    };
    if reg.subscribers.is_empty() {
        reg.multi = Some(multi_supported && allow_multi);
    }
    let handle = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed);
    let name = name.filter(|n| !n.is_empty()).map(|n| {
        let mut full = b"CUPTI for ".to_vec();
        full.extend_from_slice(n.to_bytes());
        CString::new(full).unwrap_or_default()
    });
    reg.subscribers.push(Subscriber { handle, callback, userdata, name, enabled: Box::new([[false; MAX_CBID]; 2]) });
    Ok((handle, joined))
}

/// Removes one subscriber (its callbacks with it); false when the handle is unknown.
pub(crate) fn unsubscribe(handle: usize) -> bool {
    let mut reg = REGISTRY.write();
    let before = reg.subscribers.len();
    reg.subscribers.retain(|s| s.handle != handle);
    if reg.subscribers.is_empty() {
        reg.multi = None;
    }
    reg.subscribers.len() != before
}

/// Removes every subscriber (cuptiFinalize).
pub(crate) fn clear() {
    let mut reg = REGISTRY.write();
    reg.subscribers.clear();
    reg.multi = None;
}

pub(crate) fn count() -> usize {
    REGISTRY.read().subscribers.len()
}

/// Enables or disables one callback (`cbid`) or all of a domain (None) for `handle`; false for an unknown handle.
pub(crate) fn enable(handle: usize, domain: usize, cbid: Option<usize>, on: bool) -> bool {
    let mut reg = REGISTRY.write();
    let Some(s) = reg.subscribers.iter_mut().find(|s| s.handle == handle) else { return false };
    match cbid {
        Some(cbid) => s.enabled[domain][cbid] = on,
        None => s.enabled[domain] = [on; MAX_CBID],
    }
    true
}

/// One subscriber a callback goes to: (callback, userdata, handle).
pub(crate) type Target = (c::CUpti_CallbackFunc, usize, usize);

/// The subscribers that enabled `cbid` of `domain`, in subscription order, and how many.
pub(crate) fn targets(domain: usize, cbid: usize) -> ([Target; MAX_DISPATCH], usize) {
    let mut out = [(None, 0usize, 0usize); MAX_DISPATCH];
    let mut n = 0;
    for s in REGISTRY.read().subscribers.iter() {
        if n < MAX_DISPATCH && s.enabled[domain].get(cbid).copied().unwrap_or(false) {
            out[n] = (s.callback, s.userdata, s.handle);
            n += 1;
        }
    }
    (out, n)
}

/// Whether `handle` is a live subscriber.
pub(crate) fn exists(handle: usize) -> bool {
    REGISTRY.read().subscribers.iter().any(|s| s.handle == handle)
}

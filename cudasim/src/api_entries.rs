//! The CUPTI entry points of the API activity records and the activity attributes (**test double**): what each
//! models is in `api_records.rs`, kept apart from these entry points so that the record path (`activity.rs`) and
//! the API layer (`cupti.rs`) both depend on it without a circle.

use crate::api_records::{set_attribute, set_legacy};
use crate::c;
use crate::subscribers::MAX_CBID;
use std::ffi::c_void;

cupti_entry!(
    fn cuptiActivityEnableRuntimeApi(cbid: c::CUpti_CallbackId, enable: u8) {
        api_records_for(1, cbid, enable)
    }
);

cupti_entry!(
    fn cuptiActivityEnableDriverApi(cbid: c::CUpti_CallbackId, enable: u8) {
        api_records_for(0, cbid, enable)
    }
);

cupti_entry!(
    fn cuptiActivityEnableRuntimeApi_v2(handle: c::CUpti_SubscriberHandle, cbid: c::CUpti_CallbackId, enable: u8) {
        api_records_for_subscriber(handle, 1, cbid, enable)
    }
);

cupti_entry!(
    fn cuptiActivityEnableDriverApi_v2(handle: c::CUpti_SubscriberHandle, cbid: c::CUpti_CallbackId, enable: u8) {
        api_records_for_subscriber(handle, 0, cbid, enable)
    }
);

/// `cuptiActivityEnable{Runtime,Driver}Api`: from CUDA 12.5 (API version 23; see `api_records.rs`).
fn api_records_for(domain: usize, cbid: u32, enable: u8) -> c::CUptiResult {
    if crate::release::current().api_version < 23 {
        return c::CUPTI_ERROR_NOT_SUPPORTED;
    }
    if cbid as usize >= MAX_CBID {
        return c::CUPTI_ERROR_INVALID_PARAMETER;
    }
    set_legacy(domain, Some(cbid), enable != 0);
    c::CUPTI_SUCCESS
}

/// The `_v2` forms: the per-subscriber Activity API (13.5 here, as the other v2 entry points).
fn api_records_for_subscriber(
    handle: c::CUpti_SubscriberHandle,
    domain: usize,
    cbid: u32,
    enable: u8,
) -> c::CUptiResult {
    let h = match crate::cupti::v2_subscriber(handle) {
        Ok(h) => h,
        Err(e) => return e,
    };
    if cbid as usize >= MAX_CBID {
        return c::CUPTI_ERROR_INVALID_PARAMETER;
    }
    crate::activity::set_api_v2(h, domain, cbid, enable != 0);
    c::CUPTI_SUCCESS
}

cupti_entry!(
    fn cuptiActivitySetAttribute(attr: c::CUpti_ActivityAttribute, size: *mut usize, value: *mut c_void) {
        // SAFETY: the caller's pointers, checked for null inside.
        unsafe { set_attribute(attr, size, value as *mut u8) }
    }
);

cupti_entry!(
    fn cuptiActivitySetAttribute_v2(
        handle: c::CUpti_SubscriberHandle,
        attr: c::CUpti_ActivityAttribute,
        size: *mut usize,
        value: *mut c_void,
    ) {
        if let Err(e) = crate::cupti::v2_subscriber(handle) {
            return e;
        }
        // SAFETY: the caller's pointers, checked for null inside.
        unsafe { set_attribute(attr, size, value as *mut u8) }
    }
);

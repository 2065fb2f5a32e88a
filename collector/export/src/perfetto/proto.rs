//! Field numbers and enum values of Perfetto's protos (`perfetto/protos/perfetto/trace/*.proto`: TracePacket,
//! TrackDescriptor, ProcessDescriptor, ThreadDescriptor, TrackEvent, DebugAnnotation, InternedData) that the
//! exporter writes, and the one packet sequence it writes on.

pub(super) const TRACE_PACKET: u32 = 1;
pub(super) const PKT_TIMESTAMP: u32 = 8;
pub(super) const PKT_SEQ_ID: u32 = 10;
pub(super) const PKT_TRACK_EVENT: u32 = 11;
pub(super) const PKT_INTERNED_DATA: u32 = 12;
pub(super) const PKT_SEQ_FLAGS: u32 = 13;
pub(super) const PKT_TRACK_DESCRIPTOR: u32 = 60;
pub(super) const TD_UUID: u32 = 1;
pub(super) const TD_NAME: u32 = 2;
pub(super) const TD_PROCESS: u32 = 3;
pub(super) const TD_THREAD: u32 = 4;
pub(super) const TD_PARENT: u32 = 5;
pub(super) const TD_COUNTER: u32 = 8;
pub(super) const PD_PID: u32 = 1;
pub(super) const PD_NAME: u32 = 6;
pub(super) const THD_PID: u32 = 1;
pub(super) const THD_TID: u32 = 2;
pub(super) const THD_NAME: u32 = 5;
pub(super) const TE_CATEGORY_IIDS: u32 = 3;
pub(super) const TE_DEBUG: u32 = 4;
pub(super) const TE_TYPE: u32 = 9;
pub(super) const TE_NAME_IID: u32 = 10;
pub(super) const TE_TRACK: u32 = 11;
pub(super) const TE_COUNTER: u32 = 30;
pub(super) const TE_DOUBLE_COUNTER: u32 = 44;
pub(super) const TE_FLOWS: u32 = 47;
pub(super) const TE_TERMINATING_FLOWS: u32 = 48;
pub(super) const DA_NAME_IID: u32 = 1;
pub(super) const DA_UINT: u32 = 3;
pub(super) const DA_STRING: u32 = 6;
pub(super) const DA_STRING_IID: u32 = 17;
pub(super) const ID_CATEGORIES: u32 = 1;
pub(super) const ID_NAMES: u32 = 2;
pub(super) const ID_ANNOTATION_NAMES: u32 = 3;
pub(super) const ID_ANNOTATION_STRINGS: u32 = 29;
pub(super) const TYPE_BEGIN: u64 = 1;
pub(super) const TYPE_END: u64 = 2;
pub(super) const TYPE_INSTANT: u64 = 3;
pub(super) const TYPE_COUNTER: u64 = 4;
pub(super) const SEQ_CLEARED: u64 = 1;
pub(super) const SEQ_NEEDS_STATE: u64 = 2;
pub(super) const SEQUENCE: u64 = 1;

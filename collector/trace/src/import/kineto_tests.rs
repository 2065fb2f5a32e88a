//! The Kineto importer's tests: exact timestamps, memcpy kinds, both schemas, refusals.

use super::*;

#[test]
fn decimal_microseconds_become_exact_nanoseconds() {
    assert_eq!(us_to_ns("1712195495506161.2"), Some(1712195495506161200));
    assert_eq!(us_to_ns("1682725898082228"), Some(1682725898082228000));
    assert_eq!(us_to_ns("2.368"), Some(2368));
    assert_eq!(us_to_ns("0.0004"), Some(0));
    assert_eq!(us_to_ns("1.0005"), Some(1001));
    assert_eq!(us_to_ns("1e3"), Some(1_000_000));
    assert_eq!(us_to_ns("-3"), None);
    assert_eq!(us_to_ns("x"), None);
}

#[test]
fn memcpy_names_give_kinds() {
    assert_eq!(memcpy_kinds("Memcpy HtoD (Pageable -> Device)"), (1, 1, 3));
    assert_eq!(memcpy_kinds("Memcpy DtoH (Device -> Pinned)"), (2, 3, 2));
    assert_eq!(memcpy_kinds("Memcpy DtoD (Device -> Device)"), (8, 3, 3));
}

#[test]
fn old_and_new_schemas_import_alike() {
    let new = r#"{"traceEvents":[
        {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":10,"tid":11,"ts":100,"dur":5,"args":{"correlation":7,"cbid":211}},
        {"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":110.5,"dur":2.25,"args":{"correlation":7,"device":0,"stream":7,"grid":[4,1,1],"block":[128,1,1]}}]}"#;
    let old = r#"{"traceEvents":[
        {"ph":"X","cat":"Runtime","name":"cudaLaunchKernel","pid":10,"tid":11,"ts":100,"dur":5,"args":{"correlation":7}},
        {"ph":"X","cat":"Kernel","name":"k","pid":0,"tid":"stream 7","ts":110.5,"dur":2.25,"args":{"device":0,"stream":7}},
        {"ph":"f","cat":"async","id":7,"pid":0,"tid":"stream 7","ts":110.5}]}"#;
    for text in [new, old] {
        let t = import(text.as_bytes()).unwrap();
        let p = &t.processes[&10];
        let k = p.events.iter().find(|e| e.kind() == Some(EventKind::Kernel)).unwrap();
        assert_eq!((k.start, k.end, k.correlation, p.string(k.name)), (110_500, 112_750, 7, "k"));
    }
}

#[test]
fn json_without_trace_events_is_refused() {
    assert!(import(r#"{"hello": 1}"#.as_bytes()).is_err());
    assert!(import(r#"[1,2"#.as_bytes()).is_err());
}

use super::cuda::{kernel_module_version, Recorded};
use super::machine::Privileges;
use super::*;
use std::path::PathBuf;

#[test]
fn the_driver_version_is_read_from_the_kernel_module_line() {
    let text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Thu Jan 16 20:37:30 UTC 2025\nGCC version: gcc 11\n";
    assert_eq!(kernel_module_version(text).as_deref(), Some("570.86.15"));
    let open = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build\n";
    assert_eq!(kernel_module_version(open).as_deref(), Some("580.65.06"));
    assert_eq!(kernel_module_version("garbage"), None);
}

#[test]
fn a_missing_libcupti_fails_only_when_none_is_anywhere() {
    let off = Recorded {
        agent_off: Some("no libcupti found; set CUFLIGHT_CUPTI to its path (tried x)".into()),
        ..Recorded::default()
    };
    let none = verdicts::cupti(Some(&off), &[], Some(12080));
    assert_eq!(none.result, Level::Fail);
    assert!(none.fix.unwrap().contains("nvidia-cuda-cupti-cu12"));
    let wheel = [(PathBuf::from("/venv/nvidia/cuda_cupti/lib/libcupti.so.12"), Some((12, 8)))];
    let elsewhere = verdicts::cupti(Some(&off), &wheel, Some(12080));
    assert_eq!(elsewhere.result, Level::Warn);
    assert!(elsewhere.found.contains("/venv/nvidia/cuda_cupti/lib/libcupti.so.12 (CUDA 12.8)"), "{}", elsewhere.found);
}

#[test]
fn a_cupti_newer_than_the_driver_is_a_warning() {
    let r = Recorded {
        cupti: Some(("/usr/local/cuda/extras/CUPTI/lib64/libcupti.so".into(), 130000)),
        ..Recorded::default()
    };
    let libs = [(PathBuf::from("/usr/local/cuda-13.0/extras/CUPTI/lib64/libcupti.so.13.0.85"), Some((13, 0)))];
    let c = verdicts::cupti(Some(&r), &libs, Some(12080));
    assert_eq!(c.result, Level::Warn);
    assert!(c.found.contains("newer than the driver"), "{}", c.found);
    assert!(c.fix.unwrap().contains("CUDA 12.8"));
    assert_eq!(verdicts::cupti(Some(&r), &libs, Some(13000)).result, Level::Ok);
}

#[test]
fn a_probe_without_its_memset_record_fails_and_an_agent_off_names_the_check() {
    let silent = Recorded { cupti: Some(("x".into(), 1)), events: 5, ..Recorded::default() };
    assert_eq!(verdicts::recording(Some(&silent), Level::Ok, Level::Ok).result, Level::Fail);
    let taken =
        Recorded { agent_off: Some("another CUPTI client (nsys) is already subscribed".into()), ..Recorded::default() };
    let c = verdicts::recording(Some(&taken), Level::Ok, Level::Ok);
    assert_eq!(c.result, Level::Fail);
    assert_eq!(c.fix.as_deref(), Some("see the other-tools check"));
    let skipped = verdicts::recording(None, Level::Fail, Level::Ok);
    assert_eq!(skipped.result, Level::Skipped);
    assert!(skipped.found.contains("agent check failed"));
}

#[test]
fn counters_refused_by_privilege_say_how_to_allow_them() {
    let why = cuflight_format::gpu_counters::describe(cuflight_format::gpu_counters::encode(
        cuflight_format::gpu_counters::DENIED,
        35,
        0,
    ))
    .unwrap();
    let r = Recorded { counters_refused: Some(why), ..Recorded::default() };
    let c = verdicts::counters(Some(&r), None, Privileges::default(), &[]);
    assert_eq!(c.result, Level::Warn);
    assert!(c.fix.unwrap().contains("NVreg_RestrictProfilingToAdminUsers=0"));
    let param = verdicts::counters(None, Some(true), Privileges::default(), &["nv-hostengine (12)".into()]);
    assert_eq!(param.result, Level::Warn);
    assert!(param.found.contains("RmProfilingAdminOnly: 1") && param.found.contains("nv-hostengine (12)"));
    let root = Privileges { root: true, ..Privileges::default() };
    assert_eq!(verdicts::counters(None, Some(true), root, &[]).result, Level::Ok);
}

#[test]
fn the_text_says_whether_record_would_work_and_each_fix_under_its_check() {
    let d = Diagnosis {
        record_would_work: false,
        checks: vec![Check {
            check: checks::AGENT,
            result: Level::Fail,
            found: "none".into(),
            fix: Some("install".into()),
        }],
    };
    let text = render(&d);
    assert!(text.starts_with("cuflight doctor: `cuflight record` would NOT work here (1 failed check(s)"), "{text}");
    assert!(text.contains("FAIL  agent        none\n"), "{text}");
    assert!(text.contains("fix: install\n"), "{text}");
}

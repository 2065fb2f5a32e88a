//! The x86-64 stub: it puts back the XSAVE (or FXSAVE) image, the flags and every integer register from a
//! context on the thread's stack, r12 last, and jumps to the resume address stored in its own last 8 bytes. A
//! system call the thread was stopped in is resumed as the kernel would have done it (x86 `signal.c`): the
//! restart codes rewind to the `syscall` instruction with the call's number again, and `-ERESTART_RESTARTBLOCK`
//! goes through `restart_syscall`. The context goes below the 128-byte red zone, which the ABI leaves to whoever
//! runs next.

use crate::ptrace::FpState;
use std::ffi::CStr;

/// The stub, assembled from `x86_64.S` (beside this file; `stub_matches_its_source` checks the bytes
/// against it where `as` is installed). `r12` points at the context; the last 8 bytes take the address to
/// resume at (read rip-relative after every register, r12 included, is back).
const CODE: [u8; 166] = [
    0x41, 0xff, 0x94, 0x24, 0x88, 0x00, 0x00, 0x00, 0x49, 0x89, 0x84, 0x24, 0x90, 0x00, 0x00, 0x00, 0xb8, 0x27, 0x00,
    0x00, 0x00, 0x0f, 0x05, 0xb8, 0xff, 0xff, 0xff, 0xff, 0xba, 0xff, 0xff, 0xff, 0xff, 0x49, 0x83, 0xbc, 0x24, 0xa0,
    0x00, 0x00, 0x00, 0x00, 0x74, 0x0b, 0x49, 0x0f, 0xae, 0xac, 0x24, 0xc0, 0x00, 0x00, 0x00, 0xeb, 0x09, 0x49, 0x0f,
    0xae, 0x8c, 0x24, 0xc0, 0x00, 0x00, 0x00, 0x49, 0x8d, 0x24, 0x24, 0x9d, 0x49, 0x8b, 0x44, 0x24, 0x08, 0x49, 0x8b,
    0x5c, 0x24, 0x10, 0x49, 0x8b, 0x4c, 0x24, 0x18, 0x49, 0x8b, 0x54, 0x24, 0x20, 0x49, 0x8b, 0x74, 0x24, 0x28, 0x49,
    0x8b, 0x7c, 0x24, 0x30, 0x49, 0x8b, 0x6c, 0x24, 0x38, 0x4d, 0x8b, 0x44, 0x24, 0x40, 0x4d, 0x8b, 0x4c, 0x24, 0x48,
    0x4d, 0x8b, 0x54, 0x24, 0x50, 0x4d, 0x8b, 0x5c, 0x24, 0x58, 0x4d, 0x8b, 0x6c, 0x24, 0x68, 0x4d, 0x8b, 0x74, 0x24,
    0x70, 0x4d, 0x8b, 0x7c, 0x24, 0x78, 0x49, 0x8b, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00, 0x4d, 0x8b, 0x64, 0x24, 0x60,
    0xff, 0x25, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
];
/// Bytes of `CODE` that are instructions (the rest is the resume address).
pub const INSTRUCTIONS: usize = CODE.len() - 8;
/// Where the thread stands at the marker's system-call stop: just past its `syscall` (label `marker`).
pub const MARKER: u64 = 0x17;

/// Code gap needed.
pub const LEN: u64 = CODE.len() as u64;

// The context's layout (offsets the stub's instructions name).
const FLAGS: usize = 0;
const GPRS: usize = 8; // rax rbx rcx rdx rsi rdi rbp r8 r9 r10 r11 r12 r13 r14 r15 rsp
const DLOPEN: usize = 136;
const RESULT: usize = 144;
const XSAVE_KIND: usize = 160;
const FP_IMAGE: usize = 192; // 64-byte aligned, as XRSTOR needs
const NT_X86_XSTATE: libc::c_int = 0x202;

/// Kernel-internal return values of an interrupted system call (include/linux/errno.h) and x86-64's
/// `restart_syscall` number.
const ERESTARTSYS: i64 = -512;
const ERESTARTNOINTR: i64 = -513;
const ERESTARTNOHAND: i64 = -514;
const ERESTART_RESTARTBLOCK: i64 = -516;
const NR_RESTART_SYSCALL: u64 = 219;

/// Where and how the thread resumes once the call is over: (rip, rax), as the kernel would have resumed it.
fn resume_point(r: &libc::user_regs_struct) -> (u64, u64) {
    if (r.orig_rax as i64) < 0 {
        return (r.rip, r.rax);
    }
    match r.rax as i64 {
        ERESTARTSYS | ERESTARTNOINTR | ERESTARTNOHAND => (r.rip - 2, r.orig_rax),
        ERESTART_RESTARTBLOCK => (r.rip - 2, NR_RESTART_SYSCALL),
        _ => (r.rip, r.rax),
    }
}

/// The context the stub reads, and where it goes.
fn context(saved: &libc::user_regs_struct, fp: &FpState, dlopen: u64, path: &CStr) -> (u64, Vec<u8>, u64) {
    let (_, rax) = resume_point(saved);
    let path = path.to_bytes_with_nul();
    let mut ctx = vec![0u8; FP_IMAGE + fp.1.len() + path.len()];
    let mut put = |at: usize, v: u64| ctx[at..at + 8].copy_from_slice(&v.to_le_bytes());
    put(FLAGS, saved.eflags);
    let gprs = [
        rax, saved.rbx, saved.rcx, saved.rdx, saved.rsi, saved.rdi, saved.rbp, saved.r8, saved.r9, saved.r10,
        saved.r11, saved.r12, saved.r13, saved.r14, saved.r15, saved.rsp,
    ];
    for (i, v) in gprs.into_iter().enumerate() {
        put(GPRS + 8 * i, v);
    }
    put(DLOPEN, dlopen);
    put(XSAVE_KIND, (fp.0 == NT_X86_XSTATE) as u64);
    ctx[FP_IMAGE..FP_IMAGE + fp.1.len()].copy_from_slice(&fp.1);
    let path_off = FP_IMAGE + fp.1.len();
    ctx[path_off..].copy_from_slice(path);
    let base = (saved.rsp - 128 - 256 - ctx.len() as u64) & !63;
    (base, ctx, base + path_off as u64)
}

/// The stub with its resume address, its context, and the registers that start it.
pub fn prepare(
    saved: &libc::user_regs_struct,
    fp: &FpState,
    gap: u64,
    dlopen: u64,
    mode: u64,
    path: &CStr,
) -> super::Prepared {
    let (rip, _) = resume_point(saved);
    let mut code = CODE.to_vec();
    code[INSTRUCTIONS..].copy_from_slice(&rip.to_le_bytes());
    let (base, ctx, path_at) = context(saved, fp, dlopen, path);
    let mut regs = *saved;
    regs.rip = gap;
    regs.rdi = path_at;
    regs.rsi = mode;
    regs.r12 = base;
    regs.rsp = base - 64; // 16-byte aligned before the stub's `call`, as the ABI wants
    regs.rax = 0;
    regs.orig_rax = u64::MAX; // no restart of the interrupted call: the stub resumes it
    super::Prepared { code, ctx, base, result_at: base + RESULT as u64, regs }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stub_matches_its_source() {
        let dir = std::env::temp_dir().join(format!("cuflight-stub-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/stub/x86_64.S");
        let (obj, bin) = (dir.join("stub.o"), dir.join("stub.bin"));
        let assembled = std::process::Command::new("as").arg("--64").arg("-o").arg(&obj).arg(&src).status();
        if !assembled.is_ok_and(|s| s.success()) {
            eprintln!("no assembler: skipped");
            return;
        }
        let copied =
            std::process::Command::new("objcopy").args(["-O", "binary", "-j", ".text"]).arg(&obj).arg(&bin).status();
        assert!(copied.unwrap().success());
        assert_eq!(std::fs::read(&bin).unwrap(), CODE.to_vec());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_interrupted_system_call_resumes_as_the_kernel_would() {
        // SAFETY: plain data.
        let mut r: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        (r.rip, r.orig_rax) = (0x1002, 0); // read(2)
        for (rax, resume) in [
            (ERESTARTSYS, (0x1000, 0)),
            (ERESTARTNOINTR, (0x1000, 0)),
            (ERESTARTNOHAND, (0x1000, 0)),
            (ERESTART_RESTARTBLOCK, (0x1000, NR_RESTART_SYSCALL)),
            (-4, (0x1002, -4i64 as u64)),
            (17, (0x1002, 17)),
        ] {
            r.rax = rax as u64;
            assert_eq!(resume_point(&r), resume, "{rax}");
        }
        r.orig_rax = u64::MAX; // not in a system call
        r.rax = ERESTARTSYS as u64;
        assert_eq!(resume_point(&r), (0x1002, ERESTARTSYS as u64));
    }

    #[test]
    fn the_context_keeps_the_red_zone_and_aligns_the_vector_state() {
        // SAFETY: plain data.
        let mut r: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        r.rsp = 0x7fff_0000_1238;
        let fp = FpState(NT_X86_XSTATE, vec![7; 2696]);
        let path = c"/tmp/libcuflight.so";
        let (base, ctx, path_at) = context(&r, &fp, 0xdead, path);
        assert_eq!(base % 64, 0);
        assert!(base + ctx.len() as u64 <= r.rsp - 128, "below the red zone");
        assert_eq!(&ctx[FP_IMAGE..FP_IMAGE + 2696], &fp.1[..]);
        assert_eq!(path_at, base + (FP_IMAGE + 2696) as u64);
        assert_eq!(u64::from_le_bytes(ctx[DLOPEN..DLOPEN + 8].try_into().unwrap()), 0xdead);
        assert_eq!(u64::from_le_bytes(ctx[GPRS + 15 * 8..GPRS + 16 * 8].try_into().unwrap()), r.rsp);
    }
}

//! The aarch64 stub. After dlopen no register is free to hold the address to jump back to, so the kernel puts
//! the thread back: the stub ends in `rt_sigreturn` on a signal frame built from the thread's saved state
//! (arch/arm64/kernel/signal.c reads `struct rt_sigframe` at the stack pointer: every general register, sp, pc,
//! pstate, the FP/SIMD record, the signal mask, the alternate signal stack). The stub first reads the last two
//! from the thread itself into the frame, so they come back unchanged.
//!
//! A system call the thread was stopped in resumes as the kernel prepared it: arm64's `do_signal` rewinds pc to
//! the `svc` and puts the call's first argument back in x0 before the stop, "so that a debugger will see the
//! already changed PC"; the frame holds exactly that, so the thread issues the call again. (A sleep interrupted
//! with `-ERESTART_RESTARTBLOCK` starts over rather than going through `restart_syscall`: the stop does not show
//! which restart it was.)

use std::ffi::CStr;

/// The stub, assembled from `aarch64.S` (beside this file; `stub_matches_its_source` checks the bytes against
/// it where zig is installed).
const CODE: [u8; 76] = [
    0x00, 0x00, 0x80, 0xd2, 0x61, 0x42, 0x02, 0x91, 0x88, 0x10, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4, 0x00, 0x00, 0x80,
    0xd2, 0x01, 0x00, 0x80, 0xd2, 0x62, 0xa2, 0x02, 0x91, 0x03, 0x01, 0x80, 0xd2, 0xe8, 0x10, 0x80, 0xd2, 0x01, 0x00,
    0x00, 0xd4, 0xe0, 0x03, 0x14, 0xaa, 0xe1, 0x03, 0x15, 0xaa, 0xc0, 0x02, 0x3f, 0xd6, 0x60, 0x02, 0x00, 0xf9, 0x88,
    0x15, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4, 0x7f, 0x02, 0x00, 0x91, 0x68, 0x11, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4,
];
/// Bytes of `CODE` that are instructions (all of them).
pub const INSTRUCTIONS: usize = CODE.len();
/// Where the thread stands at the marker's system-call stop: just past the `svc` of its getpid (label `marker`).
pub const MARKER: u64 = 64;

/// Code gap needed.
pub const LEN: u64 = CODE.len() as u64;

// struct rt_sigframe { siginfo_t info; struct ucontext uc; } (arch/arm64/kernel/signal.c, uapi asm/ucontext.h,
// asm/sigcontext.h): the offsets the stub and the kernel read.
const RESULT: usize = 0; // in the siginfo, which rt_sigreturn ignores
const UC: usize = 128;
const MCONTEXT: usize = UC + 176; // after uc_flags, uc_link, uc_stack, uc_sigmask and 120 unused bytes, 16-aligned
const REGS: usize = MCONTEXT + 8; // x0..x30, after fault_address
const SP: usize = REGS + 31 * 8;
const PC: usize = SP + 8;
const PSTATE: usize = PC + 8;
const RESERVED: usize = MCONTEXT + 288; // the records: FP/SIMD, then a terminating empty one
const FPSIMD_MAGIC: u32 = 0x4650_8001;
const FPSIMD_SIZE: usize = 528; // head, fpsr, fpcr, 32 128-bit registers
/// sizeof(struct rt_sigframe): what rt_sigreturn checks it may read.
const FRAME: usize = MCONTEXT + 288 + 4096;

/// The thread's registers as NT_PRSTATUS gives them (user_pt_regs): plain numbers, so that the frame is built
/// and tested on any machine.
pub struct Gprs {
    pub regs: [u64; 31],
    pub sp: u64,
    pub pc: u64,
    pub pstate: u64,
}

/// The frame for `saved` and `fp` (NT_PRFPREG's user_fpsimd_state: the 32 registers, then fpsr and fpcr), the
/// path after it; below the thread's stack pointer with room to spare (AAPCS64 has no red zone), 16-aligned.
fn frame(saved: &Gprs, fp: &[u8], path: &CStr) -> (u64, Vec<u8>, u64) {
    let path = path.to_bytes_with_nul();
    let mut ctx = vec![0u8; FRAME + path.len()];
    let mut put = |at: usize, v: u64| ctx[at..at + 8].copy_from_slice(&v.to_le_bytes());
    for (i, v) in saved.regs.iter().enumerate() {
        put(REGS + 8 * i, *v);
    }
    put(SP, saved.sp);
    put(PC, saved.pc);
    put(PSTATE, saved.pstate);
    ctx[RESERVED..RESERVED + 4].copy_from_slice(&FPSIMD_MAGIC.to_le_bytes());
    ctx[RESERVED + 4..RESERVED + 8].copy_from_slice(&(FPSIMD_SIZE as u32).to_le_bytes());
    if fp.len() >= 520 {
        ctx[RESERVED + 8..RESERVED + 16].copy_from_slice(&fp[512..520]); // fpsr, fpcr
        ctx[RESERVED + 16..RESERVED + FPSIMD_SIZE].copy_from_slice(&fp[..512]);
    }
    ctx[FRAME..].copy_from_slice(path);
    let base = (saved.sp - 256 - ctx.len() as u64) & !15;
    (base, ctx, base + FRAME as u64)
}

/// The stub, its frame, and the registers that start it: x19 the frame, x20 and x21 dlopen's arguments, x22
/// dlopen, sp below the frame.
#[cfg(target_arch = "aarch64")]
pub fn prepare(
    saved: &libc::user_regs_struct,
    fp: &crate::ptrace::FpState,
    gap: u64,
    dlopen: u64,
    mode: u64,
    path: &CStr,
) -> super::Prepared {
    let gprs = Gprs { regs: saved.regs, sp: saved.sp, pc: saved.pc, pstate: saved.pstate };
    let (base, ctx, path_at) = frame(&gprs, &fp.1, path);
    let mut regs = *saved;
    regs.pc = gap;
    regs.regs[19] = base;
    regs.regs[20] = path_at;
    regs.regs[21] = mode;
    regs.regs[22] = dlopen;
    regs.sp = base - 64;
    super::Prepared { code: CODE.to_vec(), ctx, base, result_at: base + RESULT as u64, regs }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frame_is_what_rt_sigreturn_reads() {
        let mut r = Gprs { regs: [0; 31], sp: 0xffff_f000_1238, pc: 0xaaaa_0000_1004, pstate: 0x8000_0000 };
        r.regs[0] = 7;
        r.regs[30] = 0x1234;
        let mut image = vec![0u8; 528];
        image[0] = 0xd0; // v0's low byte
        image[31 * 16] = 0xd3; // v31's
        image[512..516].copy_from_slice(&0x10u32.to_le_bytes()); // fpsr
        image[516..520].copy_from_slice(&0x20u32.to_le_bytes()); // fpcr
        let (base, ctx, path_at) = frame(&r, &image, c"/tmp/libcuflight.so");
        assert_eq!(base % 16, 0, "rt_sigreturn refuses a frame that is not 16-byte aligned");
        assert!(base + ctx.len() as u64 <= r.sp - 256);
        let word = |at: usize| u64::from_le_bytes(ctx[at..at + 8].try_into().unwrap());
        assert_eq!((word(REGS), word(REGS + 30 * 8)), (7, 0x1234));
        assert_eq!((word(SP), word(PC), word(PSTATE)), (r.sp, r.pc, r.pstate));
        assert_eq!(word(RESERVED), (528u64 << 32) | FPSIMD_MAGIC as u64);
        assert_eq!(
            (word(RESERVED + 8), ctx[RESERVED + 16], ctx[RESERVED + 16 + 31 * 16]),
            (0x20_0000_0010, 0xd0, 0xd3)
        );
        assert_eq!(word(RESERVED + FPSIMD_SIZE), 0, "the terminating record");
        assert_eq!(&ctx[FRAME..], b"/tmp/libcuflight.so\0");
        assert_eq!(path_at, base + FRAME as u64);
        // The stub's own offsets (aarch64.S): uc_stack at UC + 16, uc_sigmask at UC + 40.
        assert_eq!((UC + 16, UC + 40), (144, 168));
    }

    #[test]
    fn stub_matches_its_source() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
        let python = root.join(".cache/wheel-tools/bin/python");
        if !python.exists() {
            eprintln!("no zig (scripts/wheels fetches it): skipped");
            return;
        }
        let dir = std::env::temp_dir().join(format!("cuflight-stub-a64-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (obj, bin) = (dir.join("stub.o"), dir.join("stub.bin"));
        let zig = |args: &[&std::ffi::OsStr]| {
            std::process::Command::new(&python)
                .args(["-m", "ziglang"])
                .args(args)
                .env("ZIG_GLOBAL_CACHE_DIR", root.join(".cache/wheel-tools/zig-cache"))
                .status()
                .is_ok_and(|s| s.success())
        };
        let src = root.join("inject/src/stub/aarch64.S");
        assert!(zig(&[
            "cc".as_ref(),
            "-target".as_ref(),
            "aarch64-linux-gnu".as_ref(),
            "-c".as_ref(),
            "-o".as_ref(),
            obj.as_os_str(),
            src.as_os_str()
        ]));
        assert!(zig(&[
            "objcopy".as_ref(),
            "-O".as_ref(),
            "binary".as_ref(),
            "-j".as_ref(),
            ".text".as_ref(),
            obj.as_os_str(),
            bin.as_os_str()
        ]));
        assert_eq!(std::fs::read(&bin).unwrap(), CODE.to_vec());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

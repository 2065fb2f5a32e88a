// The self-restoring dlopen call of `cuflight attach --inject` (aarch64). inject/src/stub/aarch64.rs holds these
// bytes and documents the frame x19 points at; its test reassembles this file and compares.
//   zig cc -target aarch64-linux-gnu -c -o stub.o aarch64.S && zig objcopy -O binary -j .text stub.o stub.bin
// x19: an rt_sigframe (siginfo, then a ucontext whose registers, FP/SIMD record and stack pointer are the thread's
// as it resumes), 16-byte aligned; x20, x21: dlopen's arguments; x22: dlopen; sp: 16-byte aligned below x19.
// No register can hold a jump target once every register is back, so the kernel puts them back: rt_sigreturn
// restores the general registers, sp, pc, pstate, the FP/SIMD state, the signal mask and the alternate signal
// stack from the frame, the last two read from the thread itself first.
// The getpid after the call does nothing; an injector tracing with PTRACE_SYSCALL stops there, at `marker`, and
// reads the result (in the frame's siginfo, which rt_sigreturn does not read) while the frame is intact.
    .text
    .globl stub
stub:
    mov x0, #0
    add x1, x19, #144          // &frame.uc.uc_stack
    mov x8, #132               // sigaltstack(NULL, &uc_stack)
    svc #0
    mov x0, #0
    mov x1, #0
    add x2, x19, #168          // &frame.uc.uc_sigmask
    mov x3, #8
    mov x8, #135               // rt_sigprocmask(SIG_BLOCK, NULL, &uc_sigmask, 8)
    svc #0
    mov x0, x20
    mov x1, x21
    blr x22                    // dlopen(path, mode)
    str x0, [x19]
    mov x8, #172               // getpid
    svc #0
marker:
    mov sp, x19
    mov x8, #139               // rt_sigreturn
    svc #0

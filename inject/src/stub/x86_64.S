# The self-restoring dlopen call of `cuflight attach --inject` (x86-64). inject/src/stub/x86_64.rs holds these bytes
# and documents the context r12 points at; its test reassembles this file and compares.
#   as --64 -o stub.o x86_64.S && objcopy -O binary -j .text stub.o stub.bin
# 0: rflags, 8..136: rax rbx rcx rdx rsi rdi rbp r8 r9 r10 r11 r12 r13 r14 r15 rsp (as the thread resumes),
# 136: dlopen, 144: its result, 160: 1 = XSAVE image, 0 = FXSAVE image, 192: the image.
# rdi and rsi hold dlopen's arguments; rsp is 16-byte aligned.
# The getpid after the call does nothing; an injector tracing with PTRACE_SYSCALL stops there, at `marker`,
# and reads the result while the context below the stack pointer is still intact (once the thread moves on,
# its own calls reuse that stack).
    .intel_syntax noprefix
    .text
    .globl stub
stub:
    call qword ptr [r12 + 136]
    mov qword ptr [r12 + 144], rax
    mov eax, 39
    syscall
marker:
    mov eax, -1
    mov edx, -1
    cmp qword ptr [r12 + 160], 0
    je 1f
    xrstor64 [r12 + 192]
    jmp 2f
1:
    fxrstor64 [r12 + 192]
2:
    lea rsp, [r12]
    popfq
    mov rax, [r12 + 8]
    mov rbx, [r12 + 16]
    mov rcx, [r12 + 24]
    mov rdx, [r12 + 32]
    mov rsi, [r12 + 40]
    mov rdi, [r12 + 48]
    mov rbp, [r12 + 56]
    mov r8,  [r12 + 64]
    mov r9,  [r12 + 72]
    mov r10, [r12 + 80]
    mov r11, [r12 + 88]
    mov r13, [r12 + 104]
    mov r14, [r12 + 112]
    mov r15, [r12 + 120]
    mov rsp, [r12 + 128]
    mov r12, [r12 + 96]
    jmp qword ptr [rip + resume]
resume:
    .quad 0

//! `gettid` for executables linked against a glibc older than 2.30 (the manylinux_2_28 wheels `scripts/wheels`
//! builds with zig). Rust's std calls `gettid` through a weak symbol and makes the raw system call where glibc lacks
//! it; zig's linker refuses that undefined weak reference in an executable (not in a shared library). The `cuflight`
//! binary of those wheels therefore defines the function itself, as the same system call glibc 2.30+ makes; it is
//! not exported, so nothing else in the process sees it. Compiled only with the `glibc-compat` feature.

/// The calling thread's id (gettid(2)).
#[no_mangle]
pub extern "C" fn gettid() -> libc::pid_t {
    // SAFETY: SYS_gettid takes no arguments, touches no memory and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as libc::pid_t }
}

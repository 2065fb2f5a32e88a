//! Lays out `target/<profile>/cudasim/` with the names real CUDA uses, all pointing at the one `libcudasim.so`
//! cargo builds, so that `LD_LIBRARY_PATH=target/<profile>/cudasim` makes an unmodified program (linked with
//! `-lcudart`) and the agent's `dlopen("libcupti.so.13")` find the simulator. One library serves all three roles,
//! so the driver, runtime and CUPTI share one state, as they do inside the real stack.
use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    // OUT_DIR = target/<profile>/build/cudasim-<hash>/out
    let Some(profile_dir) = out.ancestors().nth(3) else {
        return;
    };
    let dir = profile_dir.join("cudasim");
    let _ = std::fs::create_dir_all(&dir);
    for name in [
        "libcuda.so",
        "libcuda.so.1",
        "libcudart.so",
        "libcudart.so.13",
        "libcupti.so",
        "libcupti.so.13",
        "libcupti.so.12",
    ] {
        let link = dir.join(name);
        let _ = std::fs::remove_file(&link);
        let _ = std::os::unix::fs::symlink("../libcudasim.so", &link);
    }
    println!("cargo:rerun-if-changed=build.rs");
}

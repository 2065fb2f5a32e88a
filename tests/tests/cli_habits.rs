//! The command line as nsys and perf users expect it: `record CMD ARGS` without `--`, a shell's exit status for a
//! command that cannot run, a plain word when nothing used CUDA or the agent was off, shell completions.

use cuflight_integration::*;
use std::process::Command;

fn cuflight(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(cuflight_bin());
    cmd.args(args).env("LD_LIBRARY_PATH", cudasim_dir()).env_remove("CUDASIM_CUPTI_VERSION");
    cmd.envs(env.iter().copied()).output().expect("cuflight runs")
}

#[test]
fn record_takes_the_command_without_a_double_dash() {
    let dir = scratch("cli-no-dashes");
    let prog = build_c("streams", &dir);
    let trace = dir.join("t.cuf");
    // The program's own `-o` is the program's: options end at the first word that is not one.
    let out =
        cuflight(&["record", "--force", "-o", trace.to_str().unwrap(), prog.to_str().unwrap(), "3", "-o", "x"], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(count(&stats(&trace), "kernels", "name", "saxpy"), 2 * 2 * 3);
}

#[test]
fn a_command_that_cannot_run_exits_as_a_shell_would_and_leaves_no_file() {
    let dir = scratch("cli-127");
    let trace = dir.join("t.cuf");
    let t = trace.to_str().unwrap();
    let out = cuflight(&["record", "-o", t, "no-such-program-anywhere"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{err}");
    assert!(err.lines().count() == 1 && err.contains("cannot run 'no-such-program-anywhere'"), "{err}");
    assert!(!trace.exists());
    let plain = dir.join("plain.txt");
    std::fs::write(&plain, "not a program").unwrap();
    let out = cuflight(&["record", "-o", t, plain.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(126));
    let out = cuflight(&["launch", "no-such-program-anywhere"], &[]);
    assert_eq!(out.status.code(), Some(127));
}

#[test]
fn a_run_without_cuda_or_with_the_agent_off_is_said_plainly_and_not_blamed_on_the_program() {
    let dir = scratch("cli-no-cuda");
    let trace = dir.join("t.cuf");
    let t = trace.to_str().unwrap();
    let out = cuflight(&["record", "--force", "-o", t, "sh", "-c", "exit 3"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "the program's status");
    assert!(err.contains("no process of the program used CUDA"), "{err}");
    let prog = build_c("streams", &dir);
    let off = [("CUDASIM_FAIL", "cuptiActivityRegisterCallbacks")];
    let out = cuflight(&["record", "--force", "-o", t, prog.to_str().unwrap(), "1"], &off);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("agent was off in every process"), "{err}");
    let report = cuflight(&["report", t], &[]);
    let err = String::from_utf8_lossy(&report.stderr);
    assert!(!report.status.success() && err.contains("the agent was off in process"), "{err}");
    assert!(err.contains("says nothing about the program") && err.lines().count() == 1, "{err}");
}

#[test]
fn shell_completions_are_generated_for_bash_zsh_and_fish() {
    for (shell, mark) in
        [("bash", "complete -F _cuflight"), ("zsh", "#compdef cuflight"), ("fish", "complete -c cuflight")]
    {
        let out = cuflight(&["completions", shell], &[]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains(mark), "{shell}");
        assert!(text.contains("attach") && text.contains("--capture-range"), "{shell}: every subcommand and option");
    }
}

//! Live views of running cuflight agents, by role beside the trace readers: [`serve`] follows every agent this
//! user may control and serves their GPU work as Prometheus metrics; [`top`] shows the same figures as a table in
//! a terminal. Both are fed by the same loop, which records a short window of each dormant agent every period (or
//! records continuously) and folds it into counters ([`serve::metrics`]).
#![forbid(unsafe_code)]

pub mod serve;
pub mod top;

/// Why a live view could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error(
        "--listen {0} is reachable from other machines and would show them process and kernel names: add \
         --allow-remote to mean it"
    )]
    RemoteRefused(std::net::SocketAddr),
    #[error("cannot listen on {addr}: {err}")]
    Listen { addr: std::net::SocketAddr, err: std::io::Error },
    #[error(transparent)]
    Scratch(#[from] cuflight_capture::private_dir::PrivateDirError),
    #[error("top needs a terminal (for metrics a program can read, use cuflight serve)")]
    NoTerminal,
    #[error("cannot set up the terminal: {0}")]
    Terminal(std::io::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

//! cuflight's shared formats, used by the in-process agent and by the collector.
//!
//! - [`event`]: [`RawEvent`], the one fixed-size (64-byte, `repr(C)`) record every observation becomes.
//! - [`ring`]: a lock-free single-producer/single-consumer ring of `RawEvent`s over any memory region, so that it
//!   can live in a shared-memory segment that the agent writes and the collector drains from another process.
//! - [`segment`]: the layout of a process's shared-memory segment (header, string region, rings), a sealed memfd.
//! - [`strings`]: the string region's layout (ids are byte offsets), with a parser and an in-memory builder.
//! - [`channel`]: how an agent hands its segment to its collector (a Unix socket, credentials checked).
//! - [`step_names`]: which range names mark a step, one rule for the agent and the collector.
//! - [`tracing`]: what a recording traces (`--trace`), one rule for the collector and the agent.
//! - [`mod@file`] (feature `file`): the compressed, versioned trace file the collector writes.
//!
//! ```
//! use cuflight_format::{event::{EventKind, RawEvent}, ring::HeapRing};
//! let mut ring = HeapRing::new(1024);
//! let (mut producer, mut consumer) = ring.split();
//! assert!(producer.push(&RawEvent::new(EventKind::Kernel, 1, 10, 20)));
//! let mut out = Vec::new();
//! consumer.drain_into(&mut out);
//! assert_eq!(out.len(), 1);
//! ```

pub mod calls;
pub mod channel;
#[cfg(feature = "file")]
pub mod codec;
pub mod control;
pub mod decimal;
pub mod event;
#[cfg(feature = "file")]
pub mod file;
pub mod gpu_counters;
#[cfg(feature = "file")]
pub mod index;
pub mod python_reader;
pub mod ring;
pub mod segment;
pub mod step_names;
pub mod strings;
pub mod tracing;
#[cfg(feature = "file")]
pub mod varint;
pub mod view;

pub use event::{EventKind, RawEvent};

/// Where `name` stands in `table`, from 1 (0: absent): the number a fixed vocabulary gives a name, found at compile
/// time where the call is in constant position (a CUPTI call's step in a counters verdict, an interned Perfetto
/// category), so no event compares strings at run time.
pub const fn position_in(table: &[&str], name: &str) -> usize {
    let mut i = 0;
    while i < table.len() {
        let (a, b) = (table[i].as_bytes(), name.as_bytes());
        if a.len() == b.len() {
            let mut j = 0;
            while j < a.len() && a[j] == b[j] {
                j += 1;
            }
            if j == a.len() {
                return i + 1;
            }
        }
        i += 1;
    }
    0
}

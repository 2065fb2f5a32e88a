//! The requests a server handled, from the ranges it draws around each ([`super::window::NameFlags::REQUEST`]):
//! kept by the plan, summarised per iteration kind by [`super::iterations`].

use super::spans::Span;

/// A server's annotated requests, in the order they ended.
#[derive(Debug, Clone, Default)]
pub struct Requests {
    /// (start, end) of each, at most [`MAX_REQUESTS`].
    pub ended: Vec<Span>,
    /// Ended requests past [`MAX_REQUESTS`], not kept.
    pub not_kept: u64,
    pub open_at_end: u64,
    /// Where those still open began (at most [`MAX_REQUESTS`]).
    pub open_starts: Vec<u64>,
    /// Start/end ranges that ended in the trace but began before it (any name: an end carries none).
    pub begun_before: u64,
    /// The name of the first one (what the report calls them).
    pub name: Option<String>,
}

/// The most request ranges kept for the report (16 bytes each): a server's day.
pub const MAX_REQUESTS: usize = 1 << 20;

impl Requests {
    /// A request's range that ended in the trace.
    pub fn add_ended(&mut self, name: &str, span: Span) {
        self.name.get_or_insert_with(|| name.to_string());
        if self.ended.len() < MAX_REQUESTS {
            self.ended.push(span);
        } else {
            self.not_kept += 1;
        }
    }

    /// A request's range still open when the trace ended.
    pub fn add_open(&mut self, name: &str, start: u64) {
        self.open_at_end += 1;
        if self.open_starts.len() < MAX_REQUESTS {
            self.open_starts.push(start);
        }
        self.name.get_or_insert_with(|| name.to_string());
    }
}

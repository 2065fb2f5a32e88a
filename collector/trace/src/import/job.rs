//! Opening the traces of one job (one per host or rank, any format): the one way every command over several
//! traces reads them. A first pass over each trace gathers its clock facts ([`JobClockBuilder::add_source`]) and
//! whatever else the command needs from it; once the job's clock is known, a second pass reads the events, either
//! trace by trace ([`JobTraces::second`]: `merge`, the Parquet export) or all in one time order
//! ([`EventSource::open_job`]: the timeline exports and `stats`).

use crate::model::job_clock::{JobClock, JobClockBuilder, Placement};
use crate::model::source::EventSource;
use crate::model::trace::TraceError;
use std::path::{Path, PathBuf};

/// Traces that stay open between a command's two passes when it reads them trace by trace: each is then opened
/// (and an import parsed) once. With more, each is opened again for the second pass, one at a time, so that a
/// thousand ranks never hold a thousand read buffers (256 KiB each), indexes and descriptors at once.
pub const KEEP_OPEN: usize = 64;

/// A job's traces after their first pass, for the second: those kept open, and the paths of the others.
pub struct JobTraces {
    paths: Vec<PathBuf>,
    kept: Vec<Option<EventSource>>,
}

impl JobTraces {
    /// Opens each trace at `paths` in turn for the first pass: `first` reads what the command needs of it
    /// (`first` runs before the clock's pass, so a cut-short trace can be named before anything fails), then its
    /// clock facts are read. Up to `keep_open` traces stay open for the second pass; with more, none do. The job's
    /// clock comes back beside them.
    pub fn open(
        paths: &[PathBuf],
        keep_open: usize,
        first: &mut dyn FnMut(usize, &Path, &mut EventSource) -> Result<(), TraceError>,
    ) -> Result<(JobClock, JobTraces), TraceError> {
        let keep = paths.len() <= keep_open;
        let mut clock = JobClockBuilder::default();
        let mut kept = Vec::with_capacity(paths.len());
        for (i, path) in paths.iter().enumerate() {
            let mut source = EventSource::open(path)?;
            first(i, path, &mut source)?;
            clock.add_source(&mut source)?;
            kept.push(keep.then_some(source));
        }
        Ok((clock.build(), JobTraces { paths: paths.to_vec(), kept }))
    }

    /// Trace `i` (in the order of the paths) for the second pass: the one kept open, else opened again.
    pub fn second(&mut self, i: usize) -> Result<EventSource, TraceError> {
        match self.kept.get_mut(i).and_then(Option::take) {
            Some(source) => Ok(source),
            None => EventSource::open(&self.paths[i]),
        }
    }
}

impl EventSource {
    /// Several traces of one job as one source on the job's clock ([`EventSource::job`]), each opened once:
    /// `opened` hears of each as it is opened (a cut-short trace is named there). Also how each host's clock was
    /// moved onto the reference host's, and whether the traces are one job's.
    pub fn open_job(
        paths: &[PathBuf],
        command: Vec<String>,
        opened: &mut dyn FnMut(&Path, &EventSource),
    ) -> Result<(EventSource, Placement), TraceError> {
        let (clock, mut traces) = JobTraces::open(paths, usize::MAX, &mut |_, path, source| {
            opened(path, source);
            Ok(())
        })?;
        let parts = (0..paths.len()).map(|i| traces.second(i)).collect::<Result<Vec<_>, _>>()?;
        let source = Self::job(parts, &|p| clock.to_job(p), command);
        Ok((source, clock.placement()))
    }
}

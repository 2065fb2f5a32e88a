//! One Parquet table being written: its schema, and per partition (host, rank) the open file and the rows
//! buffered for its next batch. Memory stays bounded: a partition's rows go out every [`BATCH_ROWS`], every
//! partition's once [`BUFFERED_ROWS`] wait in all, and at most [`OPEN_FILES`] files are open at once (the
//! least recently used is finished; its partition's next rows start a new part file).

use arrow_array::{ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use cuflight_trace::model::host::path_safe as partition_value;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const BATCH_ROWS: usize = 64 * 1024;
pub const BUFFERED_ROWS: usize = 1 << 20;
pub const OPEN_FILES: usize = 128;
/// Hive's name for a NULL partition value (an unknown rank): Spark, Trino and DuckDB read it as NULL.
pub const NULL_PARTITION: &str = "__HIVE_DEFAULT_PARTITION__";

#[derive(Clone, Copy, PartialEq)]
pub enum Kind {
    Str,
    U32,
    U64,
    I64,
    /// Nullable (a rank may be unknown).
    OptI32,
    /// Nullable (a counter a sample lacks).
    OptF64,
    /// Nullable (a kernel that is no collective has none).
    OptStr,
}

pub enum V<'a> {
    S(&'a str),
    U32(u32),
    U64(u64),
    I64(i64),
    OptI32(Option<i32>),
    OptF64(Option<f64>),
    OptS(Option<&'a str>),
}

enum Col {
    S(Vec<String>),
    U32(Vec<u32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    OptI32(Vec<Option<i32>>),
    OptF64(Vec<Option<f64>>),
    OptS(Vec<Option<String>>),
}

impl Col {
    fn new(k: Kind) -> Col {
        match k {
            Kind::Str => Col::S(Vec::new()),
            Kind::U32 => Col::U32(Vec::new()),
            Kind::U64 => Col::U64(Vec::new()),
            Kind::I64 => Col::I64(Vec::new()),
            Kind::OptI32 => Col::OptI32(Vec::new()),
            Kind::OptF64 => Col::OptF64(Vec::new()),
            Kind::OptStr => Col::OptS(Vec::new()),
        }
    }

    fn push(&mut self, v: &V) -> bool {
        match (self, v) {
            (Col::S(c), V::S(s)) => c.push(s.to_string()),
            (Col::U32(c), V::U32(x)) => c.push(*x),
            (Col::U64(c), V::U64(x)) => c.push(*x),
            (Col::I64(c), V::I64(x)) => c.push(*x),
            (Col::OptI32(c), V::OptI32(x)) => c.push(*x),
            (Col::OptF64(c), V::OptF64(x)) => c.push(*x),
            (Col::OptS(c), V::OptS(x)) => c.push(x.map(str::to_string)),
            _ => return false,
        }
        true
    }

    fn take(&mut self) -> ArrayRef {
        match self {
            Col::S(c) => Arc::new(StringArray::from(std::mem::take(c))),
            Col::U32(c) => Arc::new(UInt32Array::from(std::mem::take(c))),
            Col::U64(c) => Arc::new(UInt64Array::from(std::mem::take(c))),
            Col::I64(c) => Arc::new(Int64Array::from(std::mem::take(c))),
            Col::OptI32(c) => Arc::new(Int32Array::from(std::mem::take(c))),
            Col::OptF64(c) => Arc::new(Float64Array::from(std::mem::take(c))),
            Col::OptS(c) => Arc::new(StringArray::from(std::mem::take(c))),
        }
    }
}

struct Part {
    cols: Vec<Col>,
    rows: usize,
    writer: Option<ArrowWriter<File>>,
    /// Part files written so far for this partition (the next one is numbered after them).
    files: u32,
    used: u64,
}

pub struct Table {
    pub name: &'static str,
    schema: SchemaRef,
    kinds: Vec<Kind>,
    parts: BTreeMap<(String, String), Part>,
    root: PathBuf,
    stem: String,
    pub rows: u64,
    pub files: u64,
    clock: u64,
}

fn props() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()))
        .set_max_row_group_row_count(Some(BATCH_ROWS * 4))
        .set_created_by(format!("cuflight {}", env!("CARGO_PKG_VERSION")))
        .build()
}

impl Table {
    /// `columns`: (name, kind); `root`: the export directory; `stem`: names this source's part files.
    pub fn new(name: &'static str, columns: &[(&str, Kind)], root: &Path, stem: &str) -> Table {
        let fields: Vec<Field> = columns
            .iter()
            .map(|&(n, k)| {
                let (t, null) = match k {
                    Kind::Str => (DataType::Utf8, false),
                    Kind::U32 => (DataType::UInt32, false),
                    Kind::U64 => (DataType::UInt64, false),
                    Kind::I64 => (DataType::Int64, false),
                    Kind::OptI32 => (DataType::Int32, true),
                    Kind::OptF64 => (DataType::Float64, true),
                    Kind::OptStr => (DataType::Utf8, true),
                };
                Field::new(n, t, null)
            })
            .collect();
        let mut meta = std::collections::HashMap::new();
        meta.insert("cuflight.schema_version".to_string(), super::SCHEMA_VERSION.to_string());
        meta.insert("cuflight.table".to_string(), name.to_string());
        Table {
            name,
            schema: Arc::new(Schema::new_with_metadata(fields, meta)),
            kinds: columns.iter().map(|c| c.1).collect(),
            parts: BTreeMap::new(),
            root: root.to_path_buf(),
            stem: stem.to_string(),
            rows: 0,
            files: 0,
            clock: 0,
        }
    }

    /// Adds a row to partition (host, rank); values in column order.
    pub fn push(&mut self, host: &str, rank: Option<u32>, row: &[V]) -> Result<(), super::ParquetError> {
        let key = (partition_value(host), rank.map_or(NULL_PARTITION.to_string(), |r| r.to_string()));
        self.clock += 1;
        let kinds = &self.kinds;
        let part = self.parts.entry(key.clone()).or_insert_with(|| Part {
            cols: kinds.iter().map(|&k| Col::new(k)).collect(),
            rows: 0,
            writer: None,
            files: 0,
            used: 0,
        });
        part.used = self.clock;
        for (c, v) in part.cols.iter_mut().zip(row) {
            if !c.push(v) {
                return Err(super::ParquetError::Internal(format!("{}: a value of the wrong type", self.name)));
            }
        }
        part.rows += 1;
        self.rows += 1;
        if part.rows >= BATCH_ROWS {
            self.flush(&key)?;
        }
        Ok(())
    }

    /// Rows waiting in all partitions.
    pub fn buffered(&self) -> usize {
        self.parts.values().map(|p| p.rows).sum()
    }

    /// Writes every partition's waiting rows.
    pub fn flush_all(&mut self) -> Result<(), super::ParquetError> {
        let keys: Vec<(String, String)> =
            self.parts.iter().filter(|(_, p)| p.rows > 0).map(|(k, _)| k.clone()).collect();
        for k in keys {
            self.flush(&k)?;
        }
        Ok(())
    }

    fn flush(&mut self, key: &(String, String)) -> Result<(), super::ParquetError> {
        let open = self.parts.values().filter(|p| p.writer.is_some()).count();
        let needs_file = self.parts.get(key).is_some_and(|p| p.writer.is_none());
        if needs_file && open >= OPEN_FILES {
            // The least recently used open file is finished.
            let lru = self
                .parts
                .iter()
                .filter(|(k, p)| p.writer.is_some() && *k != key)
                .min_by_key(|(_, p)| p.used)
                .map(|(k, _)| k.clone());
            if let Some(k) = lru {
                self.close(&k)?;
            }
        }
        if self.parts.get(key).is_none_or(|p| p.rows == 0) {
            return Ok(());
        }
        self.open(key)?;
        let (schema, table) = (self.schema.clone(), self.root.join(self.name));
        let Some(part) = self.parts.get_mut(key) else { return Ok(()) };
        let arrays: Vec<ArrayRef> = part.cols.iter_mut().map(Col::take).collect();
        part.rows = 0;
        let batch = RecordBatch::try_new(schema, arrays).map_err(|e| super::ParquetError::Internal(e.to_string()))?;
        if let Some(w) = part.writer.as_mut() {
            w.write(&batch).map_err(|e| failed(&table, e))?;
        }
        Ok(())
    }

    /// Opens the partition's next part file if none is open.
    fn open(&mut self, key: &(String, String)) -> Result<(), super::ParquetError> {
        let (schema, root, stem, name) = (self.schema.clone(), self.root.clone(), self.stem.clone(), self.name);
        let Some(part) = self.parts.get_mut(key) else { return Ok(()) };
        if part.writer.is_none() {
            let dir = root.join(name).join(format!("host={}", key.0)).join(format!("rank={}", key.1));
            std::fs::create_dir_all(&dir).map_err(|e| super::ParquetError::Io(dir.display().to_string(), e))?;
            let file_name =
                if part.files == 0 { format!("{stem}.parquet") } else { format!("{stem}.{}.parquet", part.files) };
            let path = dir.join(file_name);
            let file = File::create_new(&path).map_err(|e| super::ParquetError::Io(path.display().to_string(), e))?;
            let w = ArrowWriter::try_new(file, schema.clone(), Some(props())).map_err(|e| failed(&path, e))?;
            part.writer = Some(w);
            part.files += 1;
            self.files += 1;
        }
        Ok(())
    }

    fn close(&mut self, key: &(String, String)) -> Result<(), super::ParquetError> {
        if let Some(w) = self.parts.get_mut(key).and_then(|p| p.writer.take()) {
            w.close().map_err(|e| failed(&self.root.join(self.name), e))?;
        }
        Ok(())
    }

    /// Writes what waits and finishes every file. A table with no rows gets one empty file in partition
    /// `empty_in`, so that queries over it find its schema and return nothing rather than fail.
    pub fn finish(&mut self, empty_in: (&str, Option<u32>)) -> Result<(), super::ParquetError> {
        self.flush_all()?;
        if self.files == 0 {
            let key = (partition_value(empty_in.0), empty_in.1.map_or(NULL_PARTITION.to_string(), |r| r.to_string()));
            let kinds = &self.kinds;
            self.parts.entry(key.clone()).or_insert_with(|| Part {
                cols: kinds.iter().map(|&k| Col::new(k)).collect(),
                rows: 0,
                writer: None,
                files: 0,
                used: 0,
            });
            self.open(&key)?;
        }
        let keys: Vec<(String, String)> = self.parts.keys().cloned().collect();
        for k in keys {
            self.close(&k)?;
        }
        Ok(())
    }
}

/// A Parquet writer's failure as the user reads it: the table's directory or file, and the I/O error itself where
/// one caused it (a full disk), not the writer's wrapping ("External: ...").
fn failed(what: &Path, e: parquet::errors::ParquetError) -> super::ParquetError {
    let what = what.display().to_string();
    match e {
        parquet::errors::ParquetError::External(inner) => match inner.downcast::<std::io::Error>() {
            Ok(io) => super::ParquetError::Io(what, *io),
            Err(inner) => super::ParquetError::Parquet(what, parquet::errors::ParquetError::External(inner)),
        },
        e => super::ParquetError::Parquet(what, e),
    }
}

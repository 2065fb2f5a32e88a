//! Writes a large synthetic Nsight Systems SQLite export for the scale benchmarks, with the tables and columns of
//! `nsys export --type sqlite` that cuflight reads (their names and meanings as in the shared A100 export):
//! StringIds, PROCESSES, ThreadNames, TARGET_INFO_GPU, CUPTI_ACTIVITY_KIND_RUNTIME / KERNEL / MEMCPY /
//! SYNCHRONIZATION and NVTX_EVENTS (push/pop ranges named through textId). Each step is an NVTX range around 64
//! kernel launches, a device-to-host copy into pageable memory and a stream synchronisation.
//! Usage: gen_nsys EVENTS OUT.sqlite

use rusqlite::{params, Connection};

/// nsys' globalTid: the pid in bits 24..48, the tid in bits 0..24.
fn global(pid: i64, tid: i64) -> i64 {
    pid << 24 | tid
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(n), Some(out)) = (args.get(1).and_then(|v| v.parse::<u64>().ok()), args.get(2)) else {
        eprintln!("usage: gen_nsys EVENTS OUT.sqlite");
        std::process::exit(2);
    };
    let _ = std::fs::remove_file(out);
    let mut db = Connection::open(out)?;
    db.execute_batch(
        "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;
         CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
         CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
         CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER);
         CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, totalMemory INTEGER,
             smCount INTEGER, computeMajor INTEGER, computeMinor INTEGER);
         CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER NOT NULL PRIMARY KEY, name TEXT, description TEXT);
         CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
             eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL,
             returnValue INTEGER NOT NULL, callchainId INTEGER);
         CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
             deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
             correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL,
             gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL,
             blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL,
             dynamicSharedMemory INTEGER NOT NULL, registersPerThread INTEGER NOT NULL);
         CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL,
             deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
             correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL,
             srcKind INTEGER, dstKind INTEGER);
         CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INTEGER NOT NULL, end INTEGER NOT NULL,
             deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
             correlationId INTEGER, globalPid INTEGER, syncType INTEGER NOT NULL, eventId INTEGER NOT NULL);
         CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
             rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER,
             textId INTEGER, domainId INTEGER);",
    )?;
    let (pid, tid) = (51_000i64, 51_000i64);
    let (gpid, gtid) = (global(pid, 0), global(pid, tid));
    let tx = db.transaction()?;
    {
        let mut strings = tx.prepare("INSERT INTO StringIds VALUES (?1, ?2)")?;
        let names = ["cudaLaunchKernel_v7000", "cudaMemcpyAsync_v3020", "cudaStreamSynchronize_v3020", "step", "main"];
        for (i, s) in names.iter().enumerate() {
            strings.execute(params![i as i64 + 1, s])?;
        }
        for k in 0..48i64 {
            strings.execute(params![100 + k, format!("void gemm_kernel<{k}>(float const*, float*, int)")])?;
        }
        tx.execute("INSERT INTO PROCESSES VALUES (?1, ?2, 'python train.py')", params![gpid, pid])?;
        tx.execute("INSERT INTO ThreadNames VALUES (5, 0, ?1)", params![gtid])?;
        tx.execute(
            "INSERT INTO TARGET_INFO_GPU VALUES (0, 0, 'NVIDIA A100-SXM4-80GB', 85899345920, 108, 8, 0)",
            params![],
        )?;
        tx.execute_batch(
            "INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (34, 'NvtxMark', ''), (59, 'NvtxPushPopRange', ''),
             (60, 'NvtxStartEndRange', ''), (75, 'NvtxDomainCreate', '');",
        )?;
        let mut api = tx.prepare("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?1, ?2, 1, ?3, ?4, ?5, 0, NULL)")?;
        let mut kernel = tx.prepare(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?1, ?2, 0, 1, 7, ?3, ?4, ?5, ?5, 1024, 1, 1, 256, 1, 1, 0, 0, 32)",
        )?;
        let mut copy =
            tx.prepare("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?1, ?2, 0, 1, 7, ?3, ?4, 4096, 2, 2, 0)")?;
        let mut sync =
            tx.prepare("INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES (?1, ?2, 0, 1, 7, ?3, ?4, 3, 0)")?;
        let mut range =
            tx.prepare("INSERT INTO NVTX_EVENTS VALUES (?1, ?2, 59, NULL, NULL, NULL, NULL, ?3, ?3, 4, 0)")?;
        let (mut t, mut corr, mut written) = (1_000_000_000i64, 0i64, 0u64);
        let mut jitter = 0x9e37_79b9_u64;
        while written < n {
            let step_start = t;
            let mut gpu = t + 5_000;
            for k in 0..64i64 {
                corr += 1;
                jitter = jitter.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let dur = 2_000 + (jitter >> 54) as i64;
                api.execute(params![t, t + 3_000, gtid, corr, 1])?;
                gpu = gpu.max(t + 4_000);
                kernel.execute(params![gpu, gpu + dur, corr, gpid, 100 + k % 48])?;
                gpu += dur + 500;
                t += 4_000;
            }
            corr += 1;
            api.execute(params![t, t + 2_000, gtid, corr, 2])?;
            gpu = gpu.max(t + 1_000);
            copy.execute(params![gpu, gpu + 3_000, corr, gpid])?;
            gpu += 3_000;
            corr += 1;
            let sync_end = gpu.max(t + 4_000) + 1_000;
            api.execute(params![t + 3_000, sync_end, gtid, corr, 3])?;
            sync.execute(params![t + 3_500, sync_end - 500, corr, gpid])?;
            t = sync_end + 20_000;
            range.execute(params![step_start, t - 10_000, gtid])?;
            written += 64 * 2 + 2 + 2 + 1;
        }
    }
    tx.commit()?;
    Ok(())
}

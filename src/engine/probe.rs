//! What an engine says of itself: the properties it logs in with and the load it
//! reports with each heartbeat, measured from the machine it runs on.
//!
//! Measured at login: `os` and `arch` (Rust's `std::env::consts`), `cores`
//! (available parallelism), `memory_mb` (`MemTotal` of `/proc/meminfo`), `disk_mb`
//! (space free to an unprivileged user in the work directory, `statvfs`), `mflops`
//! (a short built-in benchmark). `site` is empty unless given. Given properties
//! (`--prop key=value`) are added as custom ones; a given property named like a
//! measured one (`os`, `arch`, `cores`, `memory_mb`, `disk_mb`, `mflops`, `site`)
//! replaces the measurement, so an operator can correct or pin it.
//!
//! Invariants: every number is an integer (the core compares integers only); a
//! probe that cannot read its source reports 0 (or empty) and logs a warning
//! rather than keep the engine from starting; nothing here reads the clock except
//! the benchmark, whose *code* is fixed and whose *result* is a measurement.
//!
//! Not here: anything Linux-specific beyond `/proc/meminfo`, `/proc/loadavg` and
//! `statvfs`; on other systems those read as 0.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::core::event::{EngineLoad, EngineProps};

/// Names of the properties the engine measures itself; a given property of one of
/// these names replaces the measurement instead of becoming a custom property.
pub const INTRINSIC_PROPS: [&str; 7] = [
    "os",
    "arch",
    "cores",
    "memory_mb",
    "disk_mb",
    "mflops",
    "site",
];
/// Names a custom property may not take: `slots` is declared by `--slots`, and the
/// requirements language reserves its keywords (a property of such a name could
/// never be reached by an expression).
pub const RESERVED_PROP_NAMES: [&str; 7] = ["slots", "and", "or", "not", "in", "true", "false"];
/// Longest property name and value accepted, in bytes.
pub const PROP_NAME_BYTES_MAX: usize = 64;
pub const PROP_VALUE_BYTES_MAX: usize = 1024;
/// Most custom properties one engine may declare.
pub const CUSTOM_PROPS_MAX: usize = 256;

/// How long the benchmark measures for, at least. It runs in rounds of fixed work
/// until this much time has passed, so it takes this long plus one round.
pub const BENCHMARK_DURATION_MIN: Duration = Duration::from_millis(60);
/// Floating-point operations per benchmark round.
const BENCHMARK_ROUND_FLOPS: u64 = 2 * BENCHMARK_LANES as u64 * BENCHMARK_STEPS_PER_ROUND;
const BENCHMARK_LANES: usize = 64;
const BENCHMARK_STEPS_PER_ROUND: u64 = 512;
/// A bound on rounds, so that a broken clock cannot make the benchmark spin for ever.
const BENCHMARK_ROUNDS_MAX: u64 = 1 << 24;

/// A given property that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PropError {
    #[error(
        "property name {0:?} is not a name the requirements language can reach: it must start with a letter or '_' \
         and hold only letters, digits, '_', '.' and '-' (at most {PROP_NAME_BYTES_MAX} bytes)"
    )]
    BadName(String),
    #[error(
        "property name {0:?} is reserved ('slots' is set by --slots; the others are keywords of requirements)"
    )]
    Reserved(String),
    #[error("property {name}={value:?}: {name} is a whole number")]
    NotANumber { name: String, value: String },
    #[error(
        "property {name}: its value is longer than {PROP_VALUE_BYTES_MAX} bytes or holds a control character"
    )]
    BadValue { name: String },
    #[error("at most {CUSTOM_PROPS_MAX} custom properties may be given, got {0}")]
    TooMany(usize),
    /// Grid Engine's queue sequence number (queue_conf(5) `seq_no`).
    #[error("property seq_no={0}: {1}")]
    BadSeqNo(String, crate::core::load::LoadError),
}

/// Splits `key=value` as the command line gives it.
pub fn parse_prop(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("a property is written KEY=VALUE, got {text:?}"))?;
    let given = BTreeMap::from([(name.to_string(), value.to_string())]);
    // Applying it checks the name, and the value of an intrinsic number (`cores=many`).
    apply_given(EngineProps::default(), &given).map_err(|e| e.to_string())?;
    Ok((name.to_string(), value.to_string()))
}

fn check_prop(name: &str, value: &str) -> Result<(), PropError> {
    let bytes = name.as_bytes();
    let well_formed = !bytes.is_empty()
        && bytes.len() <= PROP_NAME_BYTES_MAX
        && (bytes[0].is_ascii_alphabetic() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if !well_formed {
        return Err(PropError::BadName(name.to_string()));
    }
    if RESERVED_PROP_NAMES.contains(&name) {
        return Err(PropError::Reserved(name.to_string()));
    }
    if value.len() > PROP_VALUE_BYTES_MAX || value.chars().any(char::is_control) {
        return Err(PropError::BadValue {
            name: name.to_string(),
        });
    }
    Ok(())
}

/// The measured properties with the given ones applied: intrinsic names replace the
/// measurement, every other name becomes a custom property.
pub fn apply_given(
    mut props: EngineProps,
    given: &BTreeMap<String, String>,
) -> Result<EngineProps, PropError> {
    let number = |name: &str, value: &str| -> Result<u64, PropError> {
        value
            .trim()
            .parse::<u64>()
            .map_err(|_| PropError::NotANumber {
                name: name.to_string(),
                value: value.to_string(),
            })
    };
    for (name, value) in given {
        check_prop(name, value)?;
        match name.as_str() {
            "os" => props.os = value.clone(),
            "arch" => props.arch = value.clone(),
            "site" => props.site = value.clone(),
            "cores" => {
                props.cores =
                    u32::try_from(number(name, value)?).map_err(|_| PropError::NotANumber {
                        name: name.clone(),
                        value: value.clone(),
                    })?
            }
            "memory_mb" => props.memory_mb = number(name, value)?,
            "disk_mb" => props.disk_mb = number(name, value)?,
            "mflops" => props.mflops = number(name, value)?,
            _ => {
                props.custom.insert(name.clone(), value.clone());
            }
        }
    }
    if props.custom.len() > CUSTOM_PROPS_MAX {
        return Err(PropError::TooMany(props.custom.len()));
    }
    crate::core::load::check_seq_no(&props.custom)
        .map_err(|e| PropError::BadSeqNo(props.custom.get("seq_no").cloned().unwrap_or_default(), e))?;
    Ok(props)
}

/// Measures this machine: everything but the given properties. Blocks for the
/// benchmark (about [`BENCHMARK_DURATION_MIN`]); call it off the async threads.
pub fn measure(work_dir: &Path) -> EngineProps {
    let memory_mb = match std::fs::read_to_string("/proc/meminfo") {
        Ok(text) => meminfo_kb(&text, "MemTotal").map_or(0, |kb| kb / 1024),
        Err(err) => {
            tracing::warn!("cannot read /proc/meminfo, reporting memory_mb = 0: {err}");
            0
        }
    };
    let disk_mb = match disk_free_bytes(work_dir) {
        Ok(bytes) => bytes / (1024 * 1024),
        Err(err) => {
            tracing::warn!(
                "cannot measure free space in {}, reporting disk_mb = 0: {err}",
                work_dir.display()
            );
            0
        }
    };
    EngineProps {
        os: std::env::consts::OS.to_string(),
        arch: std::env::consts::ARCH.to_string(),
        cores: cores(),
        memory_mb,
        disk_mb,
        mflops: benchmark_mflops(BENCHMARK_DURATION_MIN),
        site: String::new(),
        custom: BTreeMap::new(),
        // Filled by the agent from its library directory, not measured.
        libraries: Vec::new(),
    }
}

/// The cores this process may use (its CPU affinity and cgroup quota included), at least 1.
pub fn cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX))
}

/// The load to report now: the one-minute load average per core, and available memory.
pub fn load(cores: u32) -> EngineLoad {
    let load_per_core_milli = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| loadavg_per_core_milli(&text, cores))
        .unwrap_or(0);
    let memory_free_mb = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| meminfo_kb(&text, "MemAvailable"))
        .map_or(0, |kb| kb / 1024);
    let values_milli = named_load_values(
        &std::fs::read_to_string("/proc/loadavg").unwrap_or_default(),
        &std::fs::read_to_string("/proc/meminfo").unwrap_or_default(),
        cores,
    );
    EngineLoad {
        load_per_core_milli,
        memory_free_mb,
        values_milli,
    }
}

/// Grid Engine's standard load values (complex(5)) this machine reports, in
/// milli-units, each only when it could be read: `load_short`, `load_medium`,
/// `load_long` (the 1, 5 and 15 minute load averages), `load_avg` (=
/// `load_medium`), their `np_` forms divided by the cores, and `mem_total`,
/// `mem_free`, `mem_used`, `swap_total`, `swap_free`, `swap_used` in MB
/// (Grid Engine writes bytes with a unit; gridfold counts MB, so 2 GB used is
/// `mem_used` 2048). `mem_free` is the memory available to new processes.
pub fn named_load_values(loadavg: &str, meminfo: &str, cores: u32) -> std::collections::BTreeMap<String, i64> {
    let mut values = std::collections::BTreeMap::new();
    let averages: Vec<f64> = loadavg.split_whitespace().take(3).map_while(|field| field.parse().ok()).collect();
    if let [short, medium, long] = averages[..] {
        for (name, average) in [("load_short", short), ("load_medium", medium), ("load_long", long), ("load_avg", medium)] {
            if !average.is_finite() || average < 0.0 {
                return std::collections::BTreeMap::new();
            }
            let milli = (average * 1000.0).round().min(1e15) as i64;
            values.insert(name.to_string(), milli);
            values.insert(format!("np_{name}"), milli / i64::from(cores.max(1)));
        }
    }
    let kb = |field| meminfo_kb(meminfo, field).map(|kb| i64::try_from(kb / 1024).unwrap_or(i64::MAX / 1000) * 1000);
    let (mem_total, mem_free) = (kb("MemTotal"), kb("MemAvailable"));
    let (swap_total, swap_free) = (kb("SwapTotal"), kb("SwapFree"));
    for (name, value) in [("mem_total", mem_total), ("mem_free", mem_free), ("swap_total", swap_total), ("swap_free", swap_free)] {
        if let Some(value) = value {
            values.insert(name.to_string(), value);
        }
    }
    if let (Some(total), Some(free)) = (mem_total, mem_free) {
        values.insert("mem_used".to_string(), (total - free).max(0));
    }
    if let (Some(total), Some(free)) = (swap_total, swap_free) {
        values.insert("swap_used".to_string(), (total - free).max(0));
    }
    values
}

/// A field of `/proc/meminfo`, in kB: `MemTotal:       16318412 kB`.
pub fn meminfo_kb(meminfo: &str, field: &str) -> Option<u64> {
    meminfo.lines().find_map(|line| {
        let (name, rest) = line.split_once(':')?;
        if name.trim() != field {
            return None;
        }
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The first field of `/proc/loadavg` (`0.52 0.58 0.59 1/389 12345`), divided by
/// `cores`, times 1000, rounded to the nearest integer.
pub fn loadavg_per_core_milli(loadavg: &str, cores: u32) -> Option<u32> {
    let one_minute: f64 = loadavg.split_whitespace().next()?.parse().ok()?;
    if !one_minute.is_finite() || one_minute < 0.0 {
        return None;
    }
    let milli = (one_minute * 1000.0 / f64::from(cores.max(1))).round();
    Some(if milli >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        milli as u32
    })
}

/// Bytes an unprivileged user may still write in the file system holding `dir`.
pub fn disk_free_bytes(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt as _;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "path holds a NUL byte")
    })?;
    // SAFETY: `statvfs` writes only into the zeroed struct we own; the path is NUL-terminated.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut stat) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    // the field types differ between platforms
    Ok(u64::from(stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64))
}

/// Millions of floating-point operations per second: fixed rounds of multiply-add
/// over 64 lanes, repeated until `duration_min` has passed. The work is the same on
/// every machine; only how fast it goes differs. An optimised build reports far
/// more than a debug build of the same code.
pub fn benchmark_mflops(duration_min: Duration) -> u64 {
    let mut lanes = [0.0f64; BENCHMARK_LANES];
    let mut factors = [0.0f64; BENCHMARK_LANES];
    for (i, (lane, factor)) in lanes.iter_mut().zip(factors.iter_mut()).enumerate() {
        *lane = 1.0 + i as f64 / 64.0;
        *factor = 0.999_999 - i as f64 * 1e-9;
    }
    let started = Instant::now();
    let mut rounds: u64 = 0;
    while rounds < BENCHMARK_ROUNDS_MAX {
        for _ in 0..BENCHMARK_STEPS_PER_ROUND {
            for (lane, factor) in lanes.iter_mut().zip(factors.iter()) {
                // One multiply and one add per lane and step; black_box keeps the
                // optimiser from folding the loop away.
                *lane = std::hint::black_box(*lane * *factor + 1e-7);
            }
        }
        rounds += 1;
        if started.elapsed() >= duration_min {
            break;
        }
    }
    std::hint::black_box(lanes.iter().sum::<f64>());
    let elapsed_us = started.elapsed().as_micros().max(1);
    let flops = u128::from(rounds) * u128::from(BENCHMARK_ROUND_FLOPS);
    // flops / µs = millions of flops per second.
    u64::try_from(flops / elapsed_us).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str =
        "MemTotal:       16318412 kB\nMemFree:         1048576 kB\nMemAvailable:    8388608 kB\n";

    #[test]
    fn reads_meminfo_and_loadavg() {
        assert_eq!(meminfo_kb(MEMINFO, "MemTotal"), Some(16_318_412));
        assert_eq!(meminfo_kb(MEMINFO, "MemAvailable"), Some(8_388_608));
        assert_eq!(meminfo_kb(MEMINFO, "Mem"), None);
        assert_eq!(
            loadavg_per_core_milli("0.52 0.58 0.59 1/389 12345", 2),
            Some(260)
        );
        assert_eq!(loadavg_per_core_milli("3.00 0 0 1/1 1", 4), Some(750));
        assert_eq!(loadavg_per_core_milli("garbage", 4), None);
    }

    #[test]
    fn named_load_values_are_grid_engines_in_milli_units_and_mb() {
        let meminfo = "MemTotal:       16384000 kB\nMemAvailable:    4096000 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n";
        let values = named_load_values("2.00 1.50 0.75 1/389 12345", meminfo, 4);
        let get = |name: &str| values.get(name).copied();
        assert_eq!((get("load_short"), get("load_avg"), get("np_load_avg"), get("np_load_long")), (Some(2_000), Some(1_500), Some(375), Some(187)));
        assert_eq!((get("mem_total"), get("mem_free"), get("mem_used"), get("swap_used")), (Some(16_000_000), Some(4_000_000), Some(12_000_000), Some(0)));
        assert!(crate::core::load::check_values(&values).is_ok());
        assert!(named_load_values("nan 1 1", "", 1).is_empty());
        assert!(named_load_values("garbage", "", 1).is_empty());
    }

    #[test]
    fn given_properties_override_intrinsic_ones_and_add_custom_ones() {
        let measured = EngineProps {
            os: "linux".into(),
            cores: 8,
            mflops: 900,
            ..EngineProps::default()
        };
        let given: BTreeMap<String, String> = [
            ("type", "blade"),
            ("cores", "4"),
            ("site", "lyon"),
            ("gpu.count", "2"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let props = apply_given(measured, &given).unwrap();
        assert_eq!(
            (
                props.cores,
                props.mflops,
                props.site.as_str(),
                props.os.as_str()
            ),
            (4, 900, "lyon", "linux")
        );
        assert_eq!(props.custom.len(), 2);
        assert_eq!(props.custom["type"], "blade");
        assert!(
            !props.custom.contains_key("cores"),
            "an intrinsic name is never custom"
        );

        let bad = |k: &str, v: &str| {
            apply_given(
                EngineProps::default(),
                &[(k.to_string(), v.to_string())].into(),
            )
        };
        assert!(matches!(
            bad("cores", "many"),
            Err(PropError::NotANumber { .. })
        ));
        assert!(matches!(bad("slots", "4"), Err(PropError::Reserved(_))));
        assert!(matches!(bad("9lives", "x"), Err(PropError::BadName(_))));
        assert!(matches!(bad("a b", "x"), Err(PropError::BadName(_))));
        assert!(matches!(bad("k", "a\nb"), Err(PropError::BadValue { .. })));
        assert_eq!(
            parse_prop("type=blade=x"),
            Ok(("type".into(), "blade=x".into()))
        );
        assert!(parse_prop("type").is_err());
        assert!(parse_prop("cores=many").is_err());
    }

    #[test]
    fn measures_this_machine() {
        let dir = tempfile::tempdir().unwrap();
        let props = measure(dir.path());
        assert_eq!(props.os, std::env::consts::OS);
        assert!(props.cores >= 1);
        assert!(props.mflops > 0, "the benchmark did some work");
        if cfg!(target_os = "linux") {
            assert!(props.memory_mb > 0 && props.disk_mb > 0, "{props:?}");
            assert!(load(props.cores).memory_free_mb > 0);
        }
    }
}

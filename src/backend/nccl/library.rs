//! The NCCL library, loaded by full path with libloading, and the one table of the
//! NCCL functions burnin calls.
//!
//! Why not cudarc's NCCL bindings: they find the library only by names such as
//! `libnccl.so` or `libnccl.so.13`, never `libnccl.so.2` (the only name pip's
//! nvidia-nccl ships), and they panic when it is absent. burnin finds the file itself
//! ([`super::locate`]) and resolves every function once, here, so a missing symbol is
//! an error naming the library rather than a panic in the middle of a sweep.
//!
//! The C types are declared here rather than borrowed from cudarc: NCCL's enums
//! (`ncclResult_t`, `ncclDataType_t`, `ncclRedOp_t`) travel as plain `c_int`, because a
//! newer NCCL may return a value (say 2.30's `ncclTimeout`) that a Rust enum generated
//! for an older header cannot hold. `ncclConfig_t` grows with each release; [`Config`]
//! has the newest layout burnin knows and its header says how much of it the loaded
//! NCCL should read, exactly like `NCCL_CONFIG_INITIALIZER` compiled against that
//! version.
use std::ffi::{c_char, c_int, c_void, CStr};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// `ncclResult_t`.
pub type NcclResult = c_int;
pub const NCCL_SUCCESS: NcclResult = 0;
pub const NCCL_IN_PROGRESS: NcclResult = 7;
/// `ncclComm_t`: an opaque pointer.
pub type RawComm = *mut c_void;
/// `cudaStream_t`, the same object as the driver's `CUstream`.
pub type RawStream = *mut c_void;

/// `ncclDataType_t` values (stable since NCCL 2.0; bfloat16 since 2.10).
pub mod dtype {
    use std::ffi::c_int;
    pub const UINT8: c_int = 1;
    pub const INT32: c_int = 2;
    pub const FLOAT16: c_int = 6;
    pub const FLOAT32: c_int = 7;
    pub const FLOAT64: c_int = 8;
    pub const BFLOAT16: c_int = 9;
}

/// `ncclRedOp_t` values (avg since NCCL 2.10).
pub mod redop {
    use std::ffi::c_int;
    pub const SUM: c_int = 0;
    pub const PROD: c_int = 1;
    pub const MAX: c_int = 2;
    pub const MIN: c_int = 3;
    pub const AVG: c_int = 4;
}

/// The name NCCL's header gives a result code.
pub fn result_name(r: NcclResult) -> &'static str {
    match r {
        0 => "ncclSuccess",
        1 => "ncclUnhandledCudaError",
        2 => "ncclSystemError",
        3 => "ncclInternalError",
        4 => "ncclInvalidArgument",
        5 => "ncclInvalidUsage",
        6 => "ncclRemoteError",
        7 => "ncclInProgress",
        8 => "ncclTimeout",
        _ => "unknown ncclResult_t",
    }
}

/// `ncclUniqueId`: 128 opaque bytes made by one rank and given to all.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    pub internal: [c_char; UNIQUE_ID_BYTES],
}
pub const UNIQUE_ID_BYTES: usize = 128;

/// An NCCL version, as `ncclGetVersion` encodes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NcclVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl NcclVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> NcclVersion {
        NcclVersion {
            major,
            minor,
            patch,
        }
    }
    /// Decode `ncclGetVersion`'s integer: major·10000 + minor·100 + patch since 2.9,
    /// major·1000 + minor·100 + patch before (NCCL's `NCCL_VERSION` macro).
    pub fn from_code(code: i32) -> NcclVersion {
        let c = code.max(0) as u32;
        if c >= 10000 {
            NcclVersion::new(c / 10000, (c % 10000) / 100, c % 100)
        } else {
            NcclVersion::new(c / 1000, (c % 1000) / 100, c % 100)
        }
    }
    /// The integer `NCCL_VERSION(major, minor, patch)` gives (the config's `version`).
    pub fn code(self) -> u32 {
        if self.major <= 2 && self.minor <= 8 {
            self.major * 1000 + self.minor * 100 + self.patch
        } else {
            self.major * 10000 + self.minor * 100 + self.patch
        }
    }
}

impl fmt::Display for NcclVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Oldest NCCL burnin runs on: non-blocking communicators (`ncclConfig_t.blocking`,
/// `ncclCommFinalize`) arrived in 2.14; ncclAvg and bfloat16 in 2.10.
pub const OLDEST_SUPPORTED: NcclVersion = NcclVersion::new(2, 14, 0);

/// `NCCL_CONFIG_UNDEF_INT`: "let NCCL choose".
const UNDEF_INT: c_int = c_int::MIN;
/// `ncclConfig_t`'s magic number.
pub const CONFIG_MAGIC: u32 = 0xcafe_beef;

/// `ncclConfig_t` in the newest layout burnin knows (NCCL 2.30). Every release only
/// appends fields, so an older NCCL reads a prefix of it: [`Config::for_version`]
/// puts that version's `sizeof(ncclConfig_t)` in `size`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub size: usize,
    pub magic: u32,
    pub version: u32,
    // 2.14
    pub blocking: c_int,
    // 2.17
    pub cga_cluster_size: c_int,
    pub min_ctas: c_int,
    pub max_ctas: c_int,
    pub net_name: *const c_char,
    // 2.18
    pub split_share: c_int,
    // 2.26
    pub traffic_class: c_int,
    // 2.27
    pub comm_name: *const c_char,
    pub collnet_enable: c_int,
    pub cta_policy: c_int,
    pub shrink_share: c_int,
    pub nvls_ctas: c_int,
    // 2.28
    pub n_channels_per_net_peer: c_int,
    pub nvlink_centric_sched: c_int,
    // 2.29
    pub graph_usage_mode: c_int,
    pub num_rma_ctx: c_int,
    // 2.30
    pub max_p2p_peers: c_int,
}

/// The newest NCCL whose `ncclConfig_t` layout [`Config`] matches.
pub const NEWEST_CONFIG_LAYOUT: NcclVersion = NcclVersion::new(2, 30, 0);

/// `sizeof(ncclConfig_t)` on x86-64/aarch64 in NCCL `v`, None before 2.14 (no config).
/// Newer than [`NEWEST_CONFIG_LAYOUT`]: that layout's size (see [`Config::for_version`]).
pub fn config_size(v: NcclVersion) -> Option<usize> {
    let mm = (v.major, v.minor);
    Some(match mm {
        _ if mm < (2, 14) => return None,
        _ if mm < (2, 17) => 24, // size, magic, version, blocking (+ padding)
        _ if mm < (2, 18) => 40, // + cgaClusterSize, minCTAs, maxCTAs, netName
        _ if mm < (2, 27) => 48, // + splitShare (2.18), trafficClass (2.26) in the padding
        _ if mm < (2, 28) => 72, // + commName, collnetEnable, CTAPolicy, shrinkShare, nvlsCTAs
        _ if mm < (2, 29) => 80, // + nChannelsPerNetPeer, nvlinkCentricSched
        _ if mm < (2, 30) => 88, // + graphUsageMode, numRmaCtx
        _ => std::mem::size_of::<Config>(), // + maxP2pPeers (96)
    })
}

impl Config {
    /// What `NCCL_CONFIG_INITIALIZER` gives a program compiled against NCCL `v`'s
    /// header: size = that version's struct size, the magic, version = `v`, and every
    /// attribute "undefined" (NCCL's defaults). For an NCCL newer than burnin knows,
    /// the header of the newest known layout: NCCL reads old headers by design.
    /// None before 2.14.
    pub fn for_version(v: NcclVersion) -> Option<Config> {
        let newest = (NEWEST_CONFIG_LAYOUT.major, NEWEST_CONFIG_LAYOUT.minor);
        let (size, claimed) = if (v.major, v.minor) > newest {
            (std::mem::size_of::<Config>(), NEWEST_CONFIG_LAYOUT)
        } else {
            (config_size(v)?, v)
        };
        Some(Config {
            size,
            magic: CONFIG_MAGIC,
            version: claimed.code(),
            blocking: UNDEF_INT,
            cga_cluster_size: UNDEF_INT,
            min_ctas: UNDEF_INT,
            max_ctas: UNDEF_INT,
            net_name: std::ptr::null(),
            split_share: UNDEF_INT,
            traffic_class: UNDEF_INT,
            comm_name: std::ptr::null(),
            collnet_enable: UNDEF_INT,
            cta_policy: UNDEF_INT,
            shrink_share: UNDEF_INT,
            nvls_ctas: UNDEF_INT,
            n_channels_per_net_peer: UNDEF_INT,
            nvlink_centric_sched: UNDEF_INT,
            graph_usage_mode: UNDEF_INT,
            num_rma_ctx: UNDEF_INT,
            max_p2p_peers: UNDEF_INT,
        })
    }

    /// The configuration burnin uses: NCCL's defaults, non-blocking.
    pub fn non_blocking(v: NcclVersion) -> Option<Config> {
        Config::for_version(v).map(|c| Config { blocking: 0, ..c })
    }
}

type FnGetVersion = unsafe extern "C" fn(*mut c_int) -> NcclResult;
type FnGetUniqueId = unsafe extern "C" fn(*mut UniqueId) -> NcclResult;
type FnCommInitRankConfig =
    unsafe extern "C" fn(*mut RawComm, c_int, UniqueId, c_int, *mut Config) -> NcclResult;
type FnCommGetAsyncError = unsafe extern "C" fn(RawComm, *mut NcclResult) -> NcclResult;
type FnComm = unsafe extern "C" fn(RawComm) -> NcclResult;
type FnGetErrorString = unsafe extern "C" fn(NcclResult) -> *const c_char;
type FnGetLastError = unsafe extern "C" fn(RawComm) -> *const c_char;
type FnAllReduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    RawComm,
    RawStream,
) -> NcclResult;
type FnAllGather = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    RawComm,
    RawStream,
) -> NcclResult;
type FnBroadcast = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    RawComm,
    RawStream,
) -> NcclResult;
type FnReduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    c_int,
    RawComm,
    RawStream,
) -> NcclResult;
type FnSend =
    unsafe extern "C" fn(*const c_void, usize, c_int, c_int, RawComm, RawStream) -> NcclResult;
type FnRecv =
    unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, RawComm, RawStream) -> NcclResult;
type FnGroup = unsafe extern "C" fn() -> NcclResult;

/// A loaded NCCL: where it is, its version, and the functions burnin calls.
///
/// Instances are leaked (`&'static`): NCCL starts threads and keeps state that must
/// never be unloaded under them, and the function pointers below stay valid only
/// while the library is mapped.
pub struct NcclLib {
    _lib: libloading::Library,
    /// The file that was loaded.
    pub path: PathBuf,
    pub version: NcclVersion,
    pub get_unique_id: FnGetUniqueId,
    pub comm_init_rank_config: FnCommInitRankConfig,
    pub comm_get_async_error: FnCommGetAsyncError,
    pub comm_finalize: FnComm,
    pub comm_destroy: FnComm,
    pub comm_abort: FnComm,
    pub get_error_string: FnGetErrorString,
    /// Since 2.13.
    pub get_last_error: Option<FnGetLastError>,
    pub all_reduce: FnAllReduce,
    pub all_gather: FnAllGather,
    /// Same signature as ncclAllReduce (recvcount instead of count).
    pub reduce_scatter: FnAllReduce,
    pub broadcast: FnBroadcast,
    pub reduce: FnReduce,
    pub send: FnSend,
    pub recv: FnRecv,
    pub group_start: FnGroup,
    pub group_end: FnGroup,
}

impl fmt::Debug for NcclLib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NCCL {} ({})", self.version, self.path.display())
    }
}

impl NcclLib {
    /// "2.28.9 (/path/to/libnccl.so.2)".
    pub fn describe(&self) -> String {
        format!("{} ({})", self.version, self.path.display())
    }

    /// NCCL's text for a result code ("unhandled cuda error ...").
    pub fn error_string(&self, r: NcclResult) -> String {
        // SAFETY: ncclGetErrorString accepts any value and returns a pointer to a
        // static NUL-terminated string (or NULL, checked).
        let p = unsafe { (self.get_error_string)(r) };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: non-null, static, NUL-terminated (see above).
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// NCCL's last detailed error message for `comm`, when it has one.
    ///
    /// # Safety
    /// `comm` must be NULL or a communicator of this library not yet destroyed.
    pub unsafe fn last_error(&self, comm: RawComm) -> Option<String> {
        let f = self.get_last_error?;
        let p = f(comm);
        if p.is_null() {
            return None;
        }
        let s = CStr::from_ptr(p).to_string_lossy().trim().to_string();
        (!s.is_empty()).then_some(s)
    }

    /// "ncclRemoteError (remote process exited or there was a network error)".
    pub fn explain(&self, r: NcclResult) -> String {
        let text = self.error_string(r);
        if text.is_empty() {
            format!("{} ({r})", result_name(r))
        } else {
            format!("{} ({text})", result_name(r))
        }
    }
}

/// Libraries loaded so far, by canonical path.
static LOADED: Mutex<Vec<&'static NcclLib>> = Mutex::new(Vec::new());

/// Why a library could not be used.
#[derive(Debug)]
pub enum LoadError {
    /// dlopen found no file by that name (only for loads by name).
    NotFound(String),
    /// The file is there but is not a usable NCCL.
    Unusable(String),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::NotFound(s) | LoadError::Unusable(s) => f.write_str(s),
        }
    }
}

/// dlerror's text ("libnccl.so.2: cannot open shared object file: No such file or
/// directory"); libloading keeps it in the error's source.
fn dl_error_text(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(inner) => inner.to_string(),
        None => e.to_string(),
    }
}

/// The file a symbol of a loaded library lives in (to name a library loaded by name).
fn file_of_symbol(addr: *const c_void) -> Option<PathBuf> {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads the loader's tables and fills `info`; `addr` is the
    // address of a function in a library that is loaded.
    let ok = unsafe { libc::dladdr(addr, &mut info) };
    if ok == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated path owned by the loader, valid while the
    // library stays loaded (it does: we hold a handle).
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    use std::os::unix::ffi::OsStrExt;
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes())))
}

/// Load NCCL from `file`: a path (contains '/') or a bare name for the dynamic
/// loader's search (LD_LIBRARY_PATH, rpath, ld.so.cache, system directories).
/// The same file loaded twice gives the same table.
pub fn load(file: &Path) -> Result<&'static NcclLib, LoadError> {
    let by_name = file.components().count() == 1 && !file.is_absolute();
    let shown = file.display().to_string();
    // SAFETY: loading NCCL runs its ELF initialisers, which only set up NCCL's own
    // state (no GPU is touched until a communicator is made). The handle is either
    // kept for the life of the process (leaked below) or dropped before any symbol
    // from it is used.
    let lib = match unsafe { libloading::Library::new(file.as_os_str()) } {
        Ok(lib) => lib,
        Err(e) => {
            let why = dl_error_text(&e);
            return Err(if by_name && why.contains("No such file") {
                LoadError::NotFound(why)
            } else {
                LoadError::Unusable(format!("{shown} could not be loaded: {why}"))
            });
        }
    };
    // SAFETY: ncclGetVersion has had this signature since NCCL 2.0; the pointer is
    // copied out of the Symbol and only used while `lib` is alive.
    let get_version: FnGetVersion = match unsafe { lib.get::<FnGetVersion>(b"ncclGetVersion\0") } {
        Ok(s) => *s,
        Err(_) => {
            return Err(LoadError::Unusable(format!(
                "{shown} is not an NCCL library (it has no ncclGetVersion)"
            )))
        }
    };
    let path = if by_name {
        file_of_symbol(get_version as *const c_void).unwrap_or_else(|| file.to_path_buf())
    } else {
        file.to_path_buf()
    };
    let canonical = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
    let mut loaded = LOADED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(known) = loaded
        .iter()
        .find(|l| std::fs::canonicalize(&l.path).unwrap_or_else(|_| l.path.clone()) == canonical)
    {
        return Ok(known);
    }
    let mut code: c_int = 0;
    // SAFETY: ncclGetVersion writes one int through a valid pointer; it needs no GPU.
    let rc = unsafe { get_version(&mut code) };
    if rc != NCCL_SUCCESS {
        return Err(LoadError::Unusable(format!(
            "{} could not report its version ({})",
            path.display(),
            result_name(rc)
        )));
    }
    let version = NcclVersion::from_code(code);
    if version < OLDEST_SUPPORTED {
        return Err(LoadError::Unusable(format!(
            "NCCL {version} at {} is too old: burnin needs NCCL {OLDEST_SUPPORTED} or newer \
             (non-blocking communicators)",
            path.display()
        )));
    }
    let table = resolve(lib, path, version).map_err(LoadError::Unusable)?;
    let table: &'static NcclLib = Box::leak(Box::new(table));
    loaded.push(table);
    Ok(table)
}

/// Resolve every function into the table, or name the first one missing.
fn resolve(
    lib: libloading::Library,
    path: PathBuf,
    version: NcclVersion,
) -> Result<NcclLib, String> {
    macro_rules! sym {
        ($name:literal, $ty:ty) => {{
            // SAFETY: the symbol's C signature is the one `$ty` spells (NCCL's public
            // header, stable across the supported versions); the fn pointer is copied
            // out and kept next to the Library that owns it, which is never unloaded.
            match unsafe { lib.get::<$ty>(concat!($name, "\0").as_bytes()) } {
                Ok(s) => *s,
                Err(_) => {
                    return Err(format!(
                        "NCCL {version} at {} lacks {}; burnin needs NCCL {OLDEST_SUPPORTED} or newer",
                        path.display(),
                        $name
                    ))
                }
            }
        }};
    }
    let get_unique_id = sym!("ncclGetUniqueId", FnGetUniqueId);
    let comm_init_rank_config = sym!("ncclCommInitRankConfig", FnCommInitRankConfig);
    let comm_get_async_error = sym!("ncclCommGetAsyncError", FnCommGetAsyncError);
    let comm_finalize = sym!("ncclCommFinalize", FnComm);
    let comm_destroy = sym!("ncclCommDestroy", FnComm);
    let comm_abort = sym!("ncclCommAbort", FnComm);
    let get_error_string = sym!("ncclGetErrorString", FnGetErrorString);
    let all_reduce = sym!("ncclAllReduce", FnAllReduce);
    let all_gather = sym!("ncclAllGather", FnAllGather);
    let reduce_scatter = sym!("ncclReduceScatter", FnAllReduce);
    let broadcast = sym!("ncclBroadcast", FnBroadcast);
    let reduce = sym!("ncclReduce", FnReduce);
    let send = sym!("ncclSend", FnSend);
    let recv = sym!("ncclRecv", FnRecv);
    let group_start = sym!("ncclGroupStart", FnGroup);
    let group_end = sym!("ncclGroupEnd", FnGroup);
    // SAFETY: as in `sym!`; ncclGetLastError is optional (NCCL 2.13+).
    let get_last_error = unsafe { lib.get::<FnGetLastError>(b"ncclGetLastError\0") }
        .ok()
        .map(|s| *s);
    Ok(NcclLib {
        _lib: lib,
        path,
        version,
        get_unique_id,
        comm_init_rank_config,
        comm_get_async_error,
        comm_finalize,
        comm_destroy,
        comm_abort,
        get_error_string,
        get_last_error,
        all_reduce,
        all_gather,
        reduce_scatter,
        broadcast,
        reduce,
        send,
        recv,
        group_start,
        group_end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_codes_decode_both_schemes() {
        assert_eq!(NcclVersion::from_code(22809), NcclVersion::new(2, 28, 9));
        assert_eq!(NcclVersion::from_code(23000), NcclVersion::new(2, 30, 0));
        assert_eq!(NcclVersion::from_code(2804), NcclVersion::new(2, 8, 4));
        assert_eq!(NcclVersion::new(2, 28, 9).code(), 22809);
        assert_eq!(NcclVersion::new(2, 8, 4).code(), 2804);
        assert_eq!(NcclVersion::new(2, 28, 9).to_string(), "2.28.9");
    }

    #[test]
    fn config_layout_is_nccl_2_30s() {
        use std::mem::{offset_of, size_of};
        assert_eq!(size_of::<Config>(), 96);
        assert_eq!(offset_of!(Config, blocking), 16);
        assert_eq!(offset_of!(Config, net_name), 32);
        assert_eq!(offset_of!(Config, split_share), 40);
        assert_eq!(offset_of!(Config, traffic_class), 44);
        assert_eq!(offset_of!(Config, comm_name), 48);
        assert_eq!(offset_of!(Config, nvls_ctas), 68);
        assert_eq!(offset_of!(Config, nvlink_centric_sched), 76);
        assert_eq!(offset_of!(Config, num_rma_ctx), 84);
        assert_eq!(offset_of!(Config, max_p2p_peers), 88);
        assert_eq!(size_of::<UniqueId>(), 128);
    }

    #[test]
    fn config_header_matches_the_loaded_version() {
        // 2.28: 80 bytes (sizeof(ncclConfig_t) in nvidia-nccl-cu13 2.28.9's nccl.h).
        let c = Config::non_blocking(NcclVersion::new(2, 28, 9)).unwrap();
        assert_eq!((c.size, c.magic, c.version), (80, 0xcafebeef, 22809));
        assert_eq!(c.blocking, 0);
        assert_eq!(c.cga_cluster_size, c_int::MIN);
        assert!(c.net_name.is_null() && c.comm_name.is_null());
        // 2.30: 96 bytes.
        let c = Config::for_version(NcclVersion::new(2, 30, 1)).unwrap();
        assert_eq!((c.size, c.version, c.blocking), (96, 23001, c_int::MIN));
        // The others burnin supports.
        for (v, size) in [
            ((2, 14, 3), 24),
            ((2, 17, 1), 40),
            ((2, 18, 5), 48),
            ((2, 21, 5), 48),
            ((2, 26, 2), 48),
            ((2, 27, 7), 72),
            ((2, 29, 2), 88),
        ] {
            let v = NcclVersion::new(v.0, v.1, v.2);
            let c = Config::for_version(v).unwrap();
            assert_eq!((c.size, c.version), (size, v.code()), "{v}");
        }
        // Newer than burnin knows: the newest known header, which NCCL accepts.
        let c = Config::for_version(NcclVersion::new(2, 31, 4)).unwrap();
        assert_eq!((c.size, c.version), (96, 23000));
        // Before non-blocking communicators: none.
        assert!(Config::for_version(NcclVersion::new(2, 13, 4)).is_none());
    }

    #[test]
    fn result_codes_have_names() {
        assert_eq!(result_name(NCCL_IN_PROGRESS), "ncclInProgress");
        assert_eq!(result_name(6), "ncclRemoteError");
        assert_eq!(result_name(42), "unknown ncclResult_t");
    }
}

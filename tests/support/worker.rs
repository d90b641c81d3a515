//! Runs the built worker in real workerd through `wrangler dev` (local mode), unbundled
//! ([`built_module`] says why): the module `scripts/build.sh` made, the one a deploy bundles.
//!
//! Each instance gets its own ports, its own `--persist-to` directory and a log file with
//! wrangler's stdout and stderr. A bash supervisor starts wrangler with `setsid` (so wrangler
//! leads a process group that also holds workerd) and kills that group as soon as the test
//! process is gone, so no process outlives the test binary.
//!
//! For crash tests, [`Worker::crash`] kills the whole group with SIGKILL (wrangler and
//! workerd die at once, as in a power cut) and [`Worker::restart`] starts it again on the
//! same ports and the same `--persist-to` state.
//!
//! [`require_build`] builds the worker (`scripts/build.sh`) when `src/` is newer than the
//! build, so a plain `cargo test` never runs a stale Wasm. Every instance is recorded
//! ([`instances`]) for the leak and panic scan that runs after all the tests that use it.

use super::http::{Request, Response};
use std::fs;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// How long an instance may take to become ready (the first start may be slow).
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(300);

/// What proves that an instance is ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// A GET through the worker is answered by the test origin (`x-origin-execution`).
    OriginAnswers,
    /// Any HTTP response from the worker to a covered request without a key (its origin is
    /// down on purpose, or is the request's own URL).
    AnyResponse,
}

pub struct WorkerConfig {
    /// A short label for the temp directory and messages.
    pub name: String,
    /// Every variable, passed as `--var NAME:VALUE`.
    pub vars: Vec<(String, String)>,
    pub readiness: Readiness,
}

/// Proves an HTTPS instance ready (see [`Https`]).
pub type HttpsProbe = Arc<dyn Fn(SocketAddr) -> Result<bool, String> + Send + Sync>;

/// Serve over HTTPS (`--local-protocol https`) with the test's own key and certificate.
/// This harness speaks plain HTTP only, so the test proves readiness with `probe`: `Ok(true)`
/// once a request through the worker is answered by the origin, `Ok(false)` or `Err(why)`
/// while it is not.
#[derive(Clone)]
pub struct Https {
    pub key_path: PathBuf,
    pub cert_path: PathBuf,
    pub probe: HttpsProbe,
}

pub struct Worker {
    pub name: String,
    pub addr: SocketAddr,
    dir: PathBuf,
    log: PathBuf,
    pid_file: PathBuf,
    /// The `--persist-to` directory.
    state: PathBuf,
    /// wrangler's command line, kept for a restart.
    args: Vec<String>,
    supervisor: Mutex<Child>,
    /// The next origin status for a marked request (see `logs::sentinel`).
    next_marker: AtomicU16,
    https_probe: Option<HttpsProbe>,
    /// The log's length when the current incarnation was started: its own lines follow.
    log_start: std::sync::atomic::AtomicU64,
}

/// What the leak scan needs of an instance: its log, and whether it is still running.
pub struct Recorded {
    pub name: String,
    pub log: PathBuf,
    pub dir: PathBuf,
    pub addr: SocketAddr,
    /// Values of its secret variables (`*TOKEN*`, `*SECRET*`, `*_KEY`, `*_KEYS`): never to
    /// be logged.
    pub secrets: Vec<String>,
    /// Set when its `Worker` was dropped: its port may then serve another instance.
    pub stopped: std::sync::atomic::AtomicBool,
}

static INSTANCES: Mutex<Vec<Arc<Recorded>>> = Mutex::new(Vec::new());

/// Every instance started by this process so far, running or not.
pub fn instances() -> Vec<Arc<Recorded>> {
    INSTANCES.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Tests (threads) that have used an instance and are still running.
static RUNNING_USERS: AtomicUsize = AtomicUsize::new(0);

/// Held in a thread-local by a test that uses an instance; its thread's end drops it.
/// Dropping it also appends the test's time (from its first use of an instance) to
/// `target/e2e-times.txt`, where `scripts/test.sh` finds the slowest tests.
struct RunningUser {
    test: String,
    since: Instant,
}

/// How long one test may run from its first use of an instance before the watchdog ends
/// the test process (`E2E_TEST_TIMEOUT_SECONDS`, default 1800). A hung test then fails the
/// run with its name, instead of holding CI until the job's own limit. The crash-rounds
/// test (`reliability::completed_keys_survive_twenty_crashes_under_load_without_a_second_execution`)
/// runs in about 75 s alone and 225–256 s inside the full suite on a fresh 2-core machine,
/// but took 430 to over 900 s there on a machine whose disk was filling (four tests at a
/// time, the reliability run among them), so the limit leaves room for that, not for a hang.
/// With keys in flight at every crash it ran 190-276 s alone on a 2-core machine whose load
/// stood at 12-17 (other builds and tests beside it).
fn test_timeout() -> Duration {
    let seconds = std::env::var("E2E_TEST_TIMEOUT_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(1800);
    Duration::from_secs(seconds)
}

/// The tests running now (name, first use of an instance), as the watchdog sees them.
static RUNNING: Mutex<Vec<(String, Instant)>> = Mutex::new(Vec::new());

/// Starts (once) the thread that ends the process when a test overruns [`test_timeout`]:
/// the supervisor of every instance sees the process go and stops its workerd, and a failed
/// run keeps its instances' directories for the post-mortem.
fn start_watchdog() {
    static STARTED: Once = Once::new();
    STARTED.call_once(|| {
        let limit = test_timeout();
        thread::spawn(move || loop {
            thread::sleep(Duration::from_secs(5));
            let running = RUNNING.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some((test, since)) = running.iter().find(|(_, since)| since.elapsed() > limit) {
                // Straight to the process's stderr: a thread spawned by a test inherits
                // libtest's output capture, which `eprintln!` would write into and lose.
                let message = format!(
                    "\nTEST TIMEOUT: {test} has run {:.0} s, over its limit of {} s (E2E_TEST_TIMEOUT_SECONDS); \
                     ending the test process so that the run fails here. Instance logs are kept under {}\n",
                    since.elapsed().as_secs_f64(),
                    limit.as_secs(),
                    temp_base().display()
                );
                let _ = std::io::Write::write_all(&mut std::io::stderr(), message.as_bytes());
                for instance in instances() {
                    let _ = fs::write(instance.dir.join("state.keep"), b"");
                    let _ = fs::write(instance.dir.join(KEPT_MARKER), b"");
                }
                std::process::exit(101);
            }
        });
    });
}

impl Drop for RunningUser {
    fn drop(&mut self) {
        RUNNING
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(test, since)| !(test == &self.test && since == &self.since));
        let line = format!("{:.1} {}\n", self.since.elapsed().as_secs_f64(), self.test);
        let file = repo_root().join("target/e2e-times.txt");
        if let Ok(mut f) = fs::OpenOptions::new().create(true).append(true).open(file) {
            let _ = std::io::Write::write_all(&mut f, line.as_bytes());
        }
        RUNNING_USERS.fetch_sub(1, Ordering::SeqCst);
    }
}

thread_local! {
    static USER: std::cell::RefCell<Option<RunningUser>> = const { std::cell::RefCell::new(None) };
}

/// Notes that the calling test uses an instance, until its thread ends. libtest runs each
/// test on a thread of its own (unless it runs one at a time, on the main thread, and then
/// nothing else runs beside the scan anyway).
fn note_user() {
    let test = match std::thread::current().name() {
        Some("main") | None => return,
        Some(name) => name.to_string(),
    };
    USER.with(|user| {
        let mut user = user.borrow_mut();
        if user.is_none() {
            start_watchdog();
            RUNNING_USERS.fetch_add(1, Ordering::SeqCst);
            let since = Instant::now();
            RUNNING.lock().unwrap_or_else(|e| e.into_inner()).push((test.clone(), since));
            *user = Some(RunningUser { test, since });
        }
    });
}

/// Waits until no other test that used an instance is still running (the caller must not
/// have used one yet); false if `timeout` passes first.
pub fn wait_for_other_tests(timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while RUNNING_USERS.load(Ordering::SeqCst) > 0 {
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(200));
    }
    true
}

/// The worker's directory: this package's, or the workspace root when a member crate
/// (client/) includes this support code.
pub fn repo_root() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    dir.ancestors().find(|d| d.join("wrangler.toml").exists()).map(Path::to_path_buf).unwrap_or(dir)
}

/// Makes sure the built worker is current, and panics (naming the command to run) when
/// the toolchain is missing. The build runs once per test process, and only does work when
/// a file under `src/` (or `Cargo.toml`, `Cargo.lock`) is newer than the build: the same
/// check as `scripts/build.sh`, which it runs.
pub fn require_build() {
    keep_instances_of_failed_tests();
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    if let Err(e) = BUILT.get_or_init(build_if_stale) {
        panic!("{e}");
    }
}

fn build_if_stale() -> Result<(), String> {
    let root = repo_root();
    let shim = root.join("build/worker/shim.mjs");
    let wrangler = root.join("node_modules/.bin/wrangler");
    if !wrangler.exists() {
        return Err(format!(
            "end-to-end tests need wrangler, but {} is missing. Run ./scripts/test.sh (it installs \
             the toolchain, builds the worker and runs the tests), or ./scripts/setup.sh.",
            wrangler.display()
        ));
    }
    if !shim.exists() || newest_source(&root) > modified(&shim) {
        let status = Command::new("bash")
            .arg("scripts/build.sh")
            .current_dir(&root)
            .status()
            .map_err(|e| format!("run scripts/build.sh: {e}"))?;
        if !status.success() || !shim.exists() {
            return Err(format!(
                "the worker build is missing or older than src/, and scripts/build.sh failed ({status}). \
                 Run ./scripts/setup.sh, then ./scripts/build.sh, and read its errors."
            ));
        }
    }
    Ok(())
}

fn modified(path: &Path) -> std::time::SystemTime {
    fs::metadata(path).and_then(|m| m.modified()).unwrap_or(std::time::UNIX_EPOCH)
}

/// The latest modification time of the files the build is made from.
fn newest_source(root: &Path) -> std::time::SystemTime {
    let mut newest = modified(&root.join("Cargo.toml")).max(modified(&root.join("Cargo.lock")));
    let mut stack = vec![root.join("src")];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                newest = newest.max(modified(&path));
            }
        }
    }
    newest
}

/// Ports handed out by [`free_port`] in this process: never handed out twice.
static RESERVED_PORTS: Mutex<Vec<u16>> = Mutex::new(Vec::new());

/// The built worker's module, which instances run unbundled (`--no-bundle`).
///
/// Why unbundled: the build already bundled it (`scripts/build.sh`), and a bundling
/// `wrangler dev` keeps an esbuild watcher that costs an idle instance about 4 % of a core.
/// With a suite's worth of instances alive at once, that alone loaded a 2-core machine past
/// the tests' own timing. Unbundled, wrangler also leaves out its dev middleware, which a
/// deployed worker never has. The module's directory holds its Wasm, which wrangler
/// attaches by its default rules.
pub fn built_module() -> PathBuf {
    repo_root().join("build/index.js")
}

/// A `wrangler.toml` for the built worker with its key object (SQLite-backed), named after
/// `name` and this test process, and `extra` appended (bindings such as `[[ratelimits]]`).
/// `{MAIN}` is filled in by [`Worker::start_with_config`].
pub fn key_object_toml(name: &str, extra: &str) -> String {
    format!(
        "name = \"{name}-{}\"\nmain = \"{{MAIN}}\"\ncompatibility_date = \"2026-04-26\"\n\n\
         [[durable_objects.bindings]]\nname = \"IDEMPOTENCY_KEYS\"\nclass_name = \"KeyObject\"\n\n\
         [[migrations]]\ntag = \"v1\"\nnew_sqlite_classes = [\"KeyObject\"]\n{extra}",
        std::process::id()
    )
}

/// Waits, if need be, until a test that counts calls against a `[[ratelimits]]` binding
/// has at least 15 s before the next minute: local workerd's limiter forgets every count
/// when the wall-clock minute turns (`floor(now / period)`), so a count that straddles it
/// would start over half-way.
pub fn within_one_rate_limit_period() {
    let second = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs_f64()
        % 60.0;
    if second > 45.0 {
        thread::sleep(Duration::from_secs_f64(60.5 - second));
    }
}

/// A `[[ratelimits]]` binding of `limit` calls a minute, as `key_object_toml`'s `extra`.
pub fn rate_limit_toml(binding: &str, namespace_id: u32, limit: u32) -> String {
    format!("\n[[ratelimits]]\nname = \"{binding}\"\nnamespace_id = \"{namespace_id}\"\nsimple = {{ limit = {limit}, period = 60 }}\n")
}

/// A loopback port that was free a moment ago, and that this process hands out only once.
///
/// Why once: a crashed instance's port is free until its restart binds it again. Handed to
/// a new instance meanwhile, it would have made the restarted instance fail to bind, and
/// its readiness probe (and then the test's retry) reach the other instance, another
/// state folder with no record of the key, which executed the retry a second time: the
/// double execution a crash once led to. [`Worker::wait_ready`] also checks that
/// this incarnation's own log says it serves the port.
///
/// Why below the kernel's ephemeral range: a port there is never handed out by a bind to
/// port 0 or to an outgoing connection, so no other process (an origin, a client, wrangler's
/// own sockets) takes a crashed instance's port before its restart binds it again, as one
/// did in a fresh-clone CI run ("Address already in use" on restart). Only this allocator
/// hands those ports out, from a point that depends on the process id, so that two test
/// processes seldom try the same ones. Where the range leaves no room below it, a port is
/// taken from the kernel as before.
pub fn free_port() -> u16 {
    const FIRST: u16 = 20_000;
    let mut reserved = RESERVED_PORTS.lock().unwrap_or_else(|e| e.into_inner());
    let below_ephemeral = ephemeral_range_start().saturating_sub(FIRST);
    if below_ephemeral > 0 {
        let offset = (std::process::id() % u32::from(below_ephemeral)) as u16;
        for step in 0..below_ephemeral {
            let port = FIRST + (offset + step) % below_ephemeral;
            if !reserved.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
                reserved.push(port);
                return port;
            }
        }
    }
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("bind 127.0.0.1:0");
        if !reserved.contains(&port) {
            reserved.push(port);
            return port;
        }
    }
}

/// A loopback listener on a port from [`free_port`]: on another port when the first was
/// taken between `free_port`'s probe and this bind.
///
/// Why: `free_port` only finds a port free a moment ago. A fresh-clone CI run once saw an
/// origin's bind fail with "Address already in use" right after its probe, which failed a test without anything being wrong with the worker. The port
/// taken stays reserved, and the line printed says which it was and what held it.
pub fn bind_free_port() -> TcpListener {
    const ATTEMPTS: u32 = 5;
    for attempt in 1..=ATTEMPTS {
        let port = free_port();
        match TcpListener::bind(("127.0.0.1", port)) {
            Ok(listener) => return listener,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && attempt < ATTEMPTS => {
                eprintln!(
                    "port {port} was taken after it was found free ({}); binding another",
                    holders_of(port)
                );
            }
            Err(e) => panic!("bind 127.0.0.1:{port}: {e}"),
        }
    }
    unreachable!("the last attempt returns or panics")
}

/// What holds `port` on loopback, from `/proc/net/tcp`: the TCP states of its sockets
/// (`0A` is LISTEN, `01` ESTABLISHED, `06` TIME_WAIT), for the line that says a port was
/// taken.
fn holders_of(port: u16) -> String {
    let wanted = format!(":{port:04X}");
    let states: Vec<String> = fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.get(1)?.ends_with(&wanted))
                .then(|| format!("state {}", fields.get(3).copied().unwrap_or("?")))
        })
        .collect();
    if states.is_empty() {
        "no socket of it in /proc/net/tcp now".to_owned()
    } else {
        states.join(", ")
    }
}

/// The first port of the kernel's ephemeral range (`ip_local_port_range`), or Linux's
/// default where it cannot be read.
fn ephemeral_range_start() -> u16 {
    fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

fn temp_base() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("e2e")
}

/// Installs (once) a panic hook that keeps every instance started so far, when any test
/// fails: a shared instance outlives the test that used it, so its state and log are kept
/// whichever test failed. The default hook still prints the panic.
fn keep_instances_of_failed_tests() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let instances = INSTANCES.try_lock().map(|list| list.clone()).unwrap_or_default();
            for instance in instances {
                let _ = fs::write(instance.dir.join("state.keep"), b"");
                let _ = fs::write(instance.dir.join(KEPT_MARKER), b"");
            }
            default(info);
        }));
    });
}

/// The file that marks a run directory as kept for reading: its test failed.
const KEPT_MARKER: &str = "KEPT-FAILED-TEST";

/// Removes run directories left by earlier test processes that are gone, except those of a
/// failed test (they hold the instance's state and log until removed by hand) and those of
/// the current `scripts/test.sh` run (its final leak scan reads their logs).
fn clean_stale_dirs() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let Ok(entries) = fs::read_dir(temp_base()) else { return };
        // `scripts/test.sh` marks the start of its run: the logs of every test process of
        // that run (the worker's and the client's) stay for its final leak scan.
        let run_start =
            fs::metadata(temp_base().with_file_name("e2e-run-start")).and_then(|m| m.modified()).ok();
        for entry in entries.flatten() {
            if entry.path().join(KEPT_MARKER).exists() {
                continue;
            }
            let log_written = fs::metadata(entry.path().join("wrangler.log")).and_then(|m| m.modified()).ok();
            if run_start.zip(log_written).is_some_and(|(start, written)| written >= start) {
                continue;
            }
            let name = entry.file_name().to_string_lossy().to_string();
            let Some(pid) = name.strip_prefix("run-").and_then(|r| r.split('-').next()) else { continue };
            if pid != std::process::id().to_string() && !Path::new("/proc").join(pid).exists() {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
    });
}

/// A value (usually a `Worker`) shared by the tests of one binary: started on first use; a
/// failed start is reported, with its reason, to every test that needs it.
pub fn shared<T>(
    cell: &'static OnceLock<Result<T, String>>,
    start: impl FnOnce() -> Result<T, String>,
) -> &'static T {
    require_build();
    note_user();
    match cell.get_or_init(start) {
        Ok(value) => value,
        Err(e) => panic!("{e}"),
    }
}

/// Startups run one at a time: each runs the `[build]` command, and they share two cores.
static START_LOCK: Mutex<()> = Mutex::new(());

/// Appends to the log, so that a restarted instance's log holds every incarnation. Keeps
/// the state when `<state>.keep` exists (a crash test is about to restart on it).
const SUPERVISOR: &str = r#"
log=$1; pidfile=$2; state=$3; testpid=$4; shift 4
setsid "$@" >>"$log" 2>&1 </dev/null &
w=$!
echo "$w" >"$pidfile"
while kill -0 "$testpid" 2>/dev/null && kill -0 "$w" 2>/dev/null; do sleep 0.5; done
kill -TERM -- -"$w" 2>/dev/null
sleep 1
kill -KILL -- -"$w" 2>/dev/null
[ -e "$state.keep" ] || rm -rf "$state"
"#;

/// `toml` without its `[build]` table (the header and every line up to the next table).
fn without_build_table(toml: &str) -> String {
    let mut in_build = false;
    let mut out = String::with_capacity(toml.len());
    for line in toml.lines() {
        let header = line.trim_start().starts_with('[');
        if header {
            in_build = line.trim() == "[build]";
        }
        if !in_build {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn spawn_supervisor(log: &Path, pid_file: &Path, state: &Path, args: &[String]) -> Result<Child, String> {
    Command::new("bash")
        .arg("-c")
        .arg(SUPERVISOR)
        .arg("e2e-supervisor")
        .arg(log)
        .arg(pid_file)
        .arg(state)
        .arg(std::process::id().to_string())
        .args(args)
        .current_dir(repo_root())
        .env("WRANGLER_SEND_METRICS", "false")
        .env("CLOUDFLARE_CF_FETCH_ENABLED", "false")
        .env("NO_COLOR", "1")
        .env("FORCE_COLOR", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("spawn bash supervisor: {e}"))
}

/// Marked requests get the 2xx statuses no origin uses (227 to 299), one per request and
/// instance, so that their decision line is the only one with that origin status.
const FIRST_MARKER_STATUS: u16 = 227;
const LAST_MARKER_STATUS: u16 = 299;

impl Worker {
    /// A status no other request to this instance has been answered with.
    pub fn next_marker_status(&self) -> u16 {
        let status = self.next_marker.fetch_add(1, Ordering::SeqCst);
        assert!(
            status <= LAST_MARKER_STATUS,
            "instance '{}' ran out of marker statuses: give the test its own instance",
            self.name
        );
        status
    }

    pub fn start(config: WorkerConfig) -> Result<Worker, String> {
        Worker::start_with(config, None, &[], &[], None, None)
    }

    /// Starts the built worker with more `wrangler dev` arguments (e.g. `--local-upstream`).
    pub fn start_with_args(config: WorkerConfig, extra: &[&str]) -> Result<Worker, String> {
        Worker::start_with(config, None, extra, &[], None, None)
    }

    /// Starts the built worker serving HTTPS (see [`Https`]). Only the client crate's
    /// end-to-end tests (`client/tests/e2e.rs`) serve HTTPS, so the worker's own e2e binary
    /// never calls it.
    #[allow(dead_code)]
    pub fn start_https(config: WorkerConfig, https: Https) -> Result<Worker, String> {
        Worker::start_with(config, None, &[], &[], Some(https), None)
    }

    /// Starts the built worker under a wrangler configuration of the test's own (written to
    /// the instance's directory; `{MAIN}` in it is replaced by [`built_module`]'s path).
    pub fn start_with_config(config: WorkerConfig, wrangler_toml: &str) -> Result<Worker, String> {
        Worker::start_with(config, Some(wrangler_toml), &[], &[], None, None)
    }

    /// [`Worker::start_with_config`], in wrangler's dev registry named `registry`, which
    /// the instances that bind each other (`script_name`) share, and no other instance
    /// joins. Every other instance is in wrangler's default registry (see `start_once`).
    pub fn start_with_config_in_registry(
        config: WorkerConfig,
        wrangler_toml: &str,
        registry: &str,
    ) -> Result<Worker, String> {
        Worker::start_with(config, Some(wrangler_toml), &[], &[], None, Some(registry))
    }

    /// [`Worker::start_with_config`], plus more workers in the same workerd (`-c` once per
    /// configuration, as `wrangler dev -c a -c b` does), so that service bindings between
    /// them work. `files` are written to the instance's directory first; `{DIR}` in a
    /// configuration is replaced by that directory.
    pub fn start_with_configs(
        config: WorkerConfig,
        wrangler_toml: &str,
        more: &[&str],
        files: &[(&str, &str)],
    ) -> Result<Worker, String> {
        let dir = temp_base().join(format!("run-{}-{}", std::process::id(), config.name));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        for (name, content) in files {
            fs::write(dir.join(name), content).map_err(|e| format!("write {name}: {e}"))?;
        }
        let more: Vec<String> =
            more.iter().map(|toml| toml.replace("{DIR}", &dir.display().to_string())).collect();
        let more: Vec<&str> = more.iter().map(String::as_str).collect();
        Worker::start_with(config, Some(wrangler_toml), &[], &more, None, None)
    }

    /// Starts an instance, on new ports once more when workerd could not bind the ones it
    /// was given: `free_port` finds a port free, and another process (an instance starting
    /// in parallel, an origin) can take it before workerd binds it ("Address already in
    /// use", seen once in a fresh-clone CI run).
    fn start_with(
        config: WorkerConfig,
        wrangler_toml: Option<&str>,
        extra: &[&str],
        more: &[&str],
        https: Option<Https>,
        registry: Option<&str>,
    ) -> Result<Worker, String> {
        const ATTEMPTS: u32 = 3;
        let WorkerConfig { name, vars, readiness } = config;
        for attempt in 1..=ATTEMPTS {
            let config = WorkerConfig { name: name.clone(), vars: vars.clone(), readiness };
            match Self::start_once(config, wrangler_toml, extra, more, https.clone(), registry) {
                Err(error) if error.contains("Address already in use") && attempt < ATTEMPTS => {
                    eprintln!(
                        "instance '{name}': a port was taken before workerd bound it; starting on new ports"
                    );
                    INSTANCES.lock().unwrap_or_else(|e| e.into_inner()).retain(|known| known.name != name);
                }
                result => return result,
            }
        }
        unreachable!("the last attempt returns")
    }

    fn start_once(
        config: WorkerConfig,
        wrangler_toml: Option<&str>,
        extra: &[&str],
        more: &[&str],
        https: Option<Https>,
        registry: Option<&str>,
    ) -> Result<Worker, String> {
        require_build();
        note_user();
        {
            // Each instance has a directory (state, log) named after it: two of one name
            // would share them.
            let instances = INSTANCES.lock().unwrap_or_else(|e| e.into_inner());
            if instances.iter().any(|known| known.name == config.name) {
                return Err(format!("two instances are named '{}': give each its own name", config.name));
            }
        }
        clean_stale_dirs();
        let _guard = START_LOCK.lock().unwrap_or_else(|e| e.into_inner());

        let root = repo_root();
        let dir = temp_base().join(format!("run-{}-{}", std::process::id(), config.name));
        if more.is_empty() {
            let _ = fs::remove_dir_all(&dir);
        }
        let state = dir.join("state");
        fs::create_dir_all(&state).map_err(|e| format!("create {}: {e}", state.display()))?;
        let log = dir.join("wrangler.log");
        let pid_file = dir.join("wrangler.pid");

        let port = free_port();
        let mut inspector_port = free_port();
        while inspector_port == port {
            inspector_port = free_port();
        }
        // Instances that must find only each other share a named registry; every other
        // instance uses wrangler's default one (service bindings between instances need it).
        let mut args: Vec<String> = match registry {
            Some(name) => vec![
                "env".into(),
                format!(
                    "WRANGLER_REGISTRY_PATH={}",
                    temp_base().join(format!("registry-{}-{name}", std::process::id())).display()
                ),
            ],
            None => Vec::new(),
        };
        args.extend::<Vec<String>>(vec![
            "node_modules/.bin/wrangler".into(),
            "dev".into(),
            "--ip".into(),
            "127.0.0.1".into(),
            "--port".into(),
            port.to_string(),
            "--inspector-port".into(),
            inspector_port.to_string(),
            "--persist-to".into(),
            state.display().to_string(),
            "--show-interactive-dev-session=false".into(),
            "--no-bundle".into(),
        ]);
        // The repository's configuration, without its `[build]` table: `require_build` has
        // built already, and wrangler runs a custom build again (and reloads the worker)
        // once its file watcher is ready, which can come after the instance answered its
        // readiness probe: a request in flight then fails ("Your worker restarted
        // mid-request").
        let repository_toml;
        let configured_by_caller = extra.iter().any(|arg| *arg == "-c" || *arg == "--config");
        let wrangler_toml = match wrangler_toml {
            Some(toml) => Some(toml),
            // The caller's own `-c` configurations stand as they are (none has `[build]`).
            None if configured_by_caller => None,
            None => {
                repository_toml = without_build_table(
                    &fs::read_to_string(root.join("wrangler.toml"))
                        .map_err(|e| format!("read wrangler.toml: {e}"))?,
                )
                .replace("main = \"build/worker/shim.mjs\"", "main = \"{MAIN}\"");
                Some(repository_toml.as_str())
            }
        };
        if let Some(toml) = wrangler_toml {
            let main = built_module();
            let file = dir.join("wrangler.toml");
            fs::write(&file, toml.replace("{MAIN}", &main.display().to_string()))
                .map_err(|e| format!("write {}: {e}", file.display()))?;
            args.push("--config".into());
            args.push(file.display().to_string());
        }
        for (i, toml) in more.iter().enumerate() {
            let file = dir.join(format!("wrangler-{}.toml", i + 1));
            fs::write(&file, toml).map_err(|e| format!("write {}: {e}", file.display()))?;
            args.push("--config".into());
            args.push(file.display().to_string());
        }
        args.extend(extra.iter().map(|arg| arg.to_string()));
        for (name, value) in &config.vars {
            args.push("--var".into());
            args.push(format!("{name}:{value}"));
        }
        let https_probe = https.map(|https| {
            args.push("--local-protocol=https".into());
            args.push(format!("--https-key-path={}", https.key_path.display()));
            args.push(format!("--https-cert-path={}", https.cert_path.display()));
            https.probe
        });

        let log_start = fs::metadata(&log).map_or(0, |m| m.len());
        let supervisor = spawn_supervisor(&log, &pid_file, &state, &args)?;
        let worker = Worker {
            name: config.name.clone(),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            dir,
            log,
            pid_file,
            state,
            args,
            supervisor: Mutex::new(supervisor),
            next_marker: AtomicU16::new(FIRST_MARKER_STATUS),
            https_probe,
            log_start: std::sync::atomic::AtomicU64::new(log_start),
        };
        INSTANCES.lock().unwrap_or_else(|e| e.into_inner()).push(Arc::new(Recorded {
            name: worker.name.clone(),
            log: worker.log.clone(),
            dir: worker.dir.clone(),
            addr: worker.addr,
            secrets: config
                .vars
                .iter()
                .filter(|(name, _)| {
                    name.contains("TOKEN")
                        || name.contains("SECRET")
                        || ["STORAGE_ENCRYPTION_KEYS", "OBJECT_NAME_KEY"].contains(&name.as_str())
                })
                .map(|(_, value)| {
                    super::requests::register_secret(value);
                    value.clone()
                })
                .collect(),
            stopped: std::sync::atomic::AtomicBool::new(false),
        }));
        worker.wait_ready(config.readiness)?;
        Ok(worker)
    }

    /// Kills wrangler and workerd at once with SIGKILL (the whole process group), keeping
    /// the `--persist-to` state. Returns once every process of the group is gone. Nothing
    /// gets a chance to clean up or flush: only what was durably written survives.
    pub fn crash(&self) {
        let keep = self.keep_marker();
        fs::write(&keep, b"").unwrap_or_else(|e| panic!("write {}: {e}", keep.display()));
        let pid = fs::read_to_string(&self.pid_file).unwrap_or_default();
        let pid = pid.trim();
        assert!(
            !pid.is_empty() && pid.chars().all(|c| c.is_ascii_digit()),
            "no wrangler pid for instance '{}'",
            self.name
        );
        let group = format!("-{pid}");
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        // The supervisor notices within half a second and exits, leaving the state alone.
        let _ = self.supervisor.lock().unwrap().wait();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Command::new("kill")
            .args(["-0", "--", &group])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            assert!(
                Instant::now() < deadline,
                "the process group of instance '{}' outlived SIGKILL",
                self.name
            );
            thread::sleep(Duration::from_millis(100));
        }
        let _ = fs::remove_file(&keep);
    }

    /// Starts wrangler again after [`Worker::crash`], on the same ports and the same
    /// `--persist-to` state; returns once the instance is ready.
    pub fn restart(&self, readiness: Readiness) -> Result<(), String> {
        let _guard = START_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        self.note_log_start();
        let child = spawn_supervisor(&self.log, &self.pid_file, &self.state, &self.args)?;
        *self.supervisor.lock().unwrap() = child;
        self.wait_ready(readiness)
    }

    /// [`Worker::restart`] with some variables changed (`--var NAME:VALUE` replaced), as an
    /// operator changes a secret and redeploys: the state is kept.
    pub fn restart_with_vars(&self, readiness: Readiness, vars: &[(&str, &str)]) -> Result<(), String> {
        let mut args = Vec::with_capacity(self.args.len());
        let mut iter = self.args.iter();
        while let Some(arg) = iter.next() {
            if arg == "--var" {
                if let Some(pair) = iter.next() {
                    if !vars.iter().any(|(name, _)| pair.starts_with(&format!("{name}:"))) {
                        args.extend([arg.clone(), pair.clone()]);
                    }
                }
                continue;
            }
            args.push(arg.clone());
        }
        for (name, value) in vars {
            args.extend(["--var".to_owned(), format!("{name}:{value}")]);
        }
        let _guard = START_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        self.note_log_start();
        let child = spawn_supervisor(&self.log, &self.pid_file, &self.state, &args)?;
        *self.supervisor.lock().unwrap() = child;
        self.wait_ready(readiness)
    }

    fn note_log_start(&self) {
        let length = fs::metadata(&self.log).map_or(0, |m| m.len());
        self.log_start.store(length, Ordering::SeqCst);
    }

    /// Whether this incarnation's own log says that it serves this instance's port: a
    /// probe answered on the port proves nothing until then (another instance could hold
    /// it).
    fn serves_own_port(&self) -> bool {
        let start = self.log_start.load(Ordering::SeqCst) as usize;
        let bytes = fs::read(&self.log).unwrap_or_default();
        let own = String::from_utf8_lossy(bytes.get(start..).unwrap_or_default()).into_owned();
        own.contains(&format!("Ready on http://127.0.0.1:{}", self.addr.port()))
            || own.contains(&format!("Ready on https://127.0.0.1:{}", self.addr.port()))
    }

    fn keep_marker(&self) -> PathBuf {
        let mut marker = self.state.clone().into_os_string();
        marker.push(".keep");
        PathBuf::from(marker)
    }

    /// The `--persist-to` directory: workerd's SQLite files live under it.
    pub fn persist_dir(&self) -> &Path {
        &self.state
    }

    fn wait_ready(&self, readiness: Readiness) -> Result<(), String> {
        let started = Instant::now();
        let mut last = String::from("no attempt yet");
        while started.elapsed() < STARTUP_TIMEOUT {
            if let Ok(Some(status)) = self.supervisor.lock().unwrap().try_wait() {
                return Err(format!(
                    "wrangler dev for instance '{}' exited ({status}) before it was ready. Log tail:\n{}",
                    self.name,
                    self.log_tail(60)
                ));
            }
            if !self.serves_own_port() {
                last = format!("its log does not say yet that it serves port {}", self.addr.port());
                thread::sleep(Duration::from_millis(250));
                continue;
            }
            if let Some(probe) = &self.https_probe {
                match probe(self.addr) {
                    Ok(true) => return Ok(()),
                    Ok(false) => last = "not ready".into(),
                    Err(e) => last = e,
                }
                thread::sleep(Duration::from_millis(250));
                continue;
            }
            // A GET reaches the origin. Any other readiness is probed with a covered request
            // without a key, which the worker answers itself (a GET in route mode would be
            // forwarded to the worker's own URL, itself).
            let probe = match readiness {
                Readiness::OriginAnswers => Request::get("/__e2e/ready"),
                Readiness::AnyResponse => {
                    Request::post("/__e2e/ready").header("Content-Type", "application/json").body("{}")
                }
            };
            let probe = probe.timeout(Duration::from_secs(10)).send(self.addr);
            match probe {
                Ok(r) if readiness == Readiness::AnyResponse => {
                    let _ = r;
                    return Ok(());
                }
                Ok(r) if r.has_header("x-origin-execution") => return Ok(()),
                Ok(r) => last = format!("{r:?}"),
                Err(e) => last = e.to_string(),
            }
            thread::sleep(Duration::from_millis(250));
        }
        Err(format!(
            "wrangler dev for instance '{}' was not ready within {:?} (last probe: {last}). Log tail:\n{}",
            self.name,
            STARTUP_TIMEOUT,
            self.log_tail(60)
        ))
    }

    /// Everything wrangler and workerd printed so far.
    pub fn log_contents(&self) -> String {
        fs::read(&self.log).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = self.log_contents();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Sends `request` to this worker and returns its answer, past wrangler dev's proxy's
    /// own 503 as [`send_past_dev_proxy`] does; panics (with the log tail) when no response
    /// comes. A test that checks that the worker never breaks wrangler's connection uses
    /// [`Worker::send_once`].
    pub fn send(&self, request: &Request) -> Response {
        match send_past_dev_proxy(self.addr, request) {
            Ok(r) => r,
            Err(e) => self.no_response(request, e),
        }
    }

    /// Sends `request` once, whatever answers it.
    pub fn send_once(&self, request: &Request) -> Response {
        match request.send(self.addr) {
            Ok(r) => r,
            Err(e) => self.no_response(request, e),
        }
    }

    fn no_response(&self, request: &Request, error: std::io::Error) -> ! {
        panic!(
            "{} {} to worker '{}' got no response: {error}. Worker log tail:\n{}",
            request.method,
            request.path,
            self.name,
            self.log_tail(40)
        )
    }
}

/// Sends `request` to the worker at `addr` and returns its answer. wrangler dev's own proxy
/// sometimes answers a POST with 503 "Your worker restarted mid-request" when the worker did
/// not restart: its pooled connection to the worker was closed by the other side as the
/// request went out on it (workers-sdk issue 14641, after about 5 s without requests on
/// that connection, which many requests at once make likely: some wait in the proxy that
/// long), so the worker never had the request. That answer, and only it, is sent again
/// (twice at most, each time said on stderr). Were the first one ever delivered after all,
/// a test that counts what the worker saw would see one request more than it sent (a
/// replay where it expects an execution, or a decision line too many) and fail; a test of
/// replays or of answer counts would not notice, and loses nothing by it. For threads that
/// hold only the worker's address; [`Worker::send`] is the same for a test that holds the
/// worker.
pub fn send_past_dev_proxy(addr: SocketAddr, request: &Request) -> std::io::Result<Response> {
    past_dev_proxy(addr, &format!("{} {}", request.method, request.path), || request.send(addr))
}

/// [`send_past_dev_proxy`] for any way of sending (`what` names the request on stderr):
/// `send` again, twice at most, while the answer is the dev proxy's own 503.
pub fn past_dev_proxy(
    addr: SocketAddr,
    what: &str,
    send: impl Fn() -> std::io::Result<Response>,
) -> std::io::Result<Response> {
    let mut answer = send()?;
    for _ in 0..2 {
        if !is_dev_proxy_503(&answer) {
            break;
        }
        eprintln!(
            "worker at {addr}: wrangler dev's proxy answered {what} with 503 \"Your worker restarted mid-request\"; sending it again"
        );
        thread::sleep(Duration::from_millis(200));
        answer = send()?;
    }
    Ok(answer)
}

/// Whether `r` is wrangler dev's proxy's own 503 (plain text, never the worker's
/// problem+json) for a request it could not hand to the worker.
fn is_dev_proxy_503(r: &Response) -> bool {
    r.status == 503 && r.text().starts_with("Your worker restarted mid-request")
}

impl Drop for Worker {
    fn drop(&mut self) {
        // A test that fails keeps what the next reader needs: the `--persist-to` state
        // (the supervisor leaves it when the keep marker exists) and the log.
        if thread::panicking() {
            let _ = fs::write(self.keep_marker(), b"");
            let _ = fs::write(self.dir.join(KEPT_MARKER), b"");
            eprintln!(
                "instance '{}' of a failed test: its state and log are kept in {}",
                self.name,
                self.dir.display()
            );
        }
        for recorded in INSTANCES.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            if recorded.dir == self.dir {
                recorded.stopped.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        if let Ok(pid) = fs::read_to_string(&self.pid_file) {
            let pid = pid.trim();
            if !pid.is_empty() && pid.chars().all(|c| c.is_ascii_digit()) {
                let group = format!("-{pid}");
                let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
                thread::sleep(Duration::from_millis(500));
                let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
            }
        }
        if let Ok(mut child) = self.supervisor.lock() {
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::http::Request;
    use super::super::origin::read_request;
    use super::{bind_free_port, holders_of, send_past_dev_proxy};
    use std::io::Write;
    use std::net::TcpListener;
    use std::thread;

    #[test]
    fn a_port_taken_is_reported_with_what_holds_it() {
        let listener = bind_free_port();
        let port = listener.local_addr().unwrap().port();
        assert!(TcpListener::bind(("127.0.0.1", port)).is_err(), "the listener holds its port");
        assert_eq!(holders_of(port), "state 0A", "a listening socket is LISTEN (0A)");
        drop(listener);
        assert_eq!(holders_of(port), "no socket of it in /proc/net/tcp now");
    }

    const DEV_PROXY_503: &str = "Your worker restarted mid-request. Please try sending the request again. Only GET or HEAD requests are retried automatically.";

    /// A loopback server that answers each connection with the next of `answers` (status,
    /// content type, body) and returns how many requests it read.
    fn serve(
        answers: Vec<(u16, &'static str, &'static str)>,
    ) -> (std::net::SocketAddr, thread::JoinHandle<usize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = thread::spawn(move || {
            let mut served = 0;
            for (status, content_type, body) in answers {
                let (mut stream, _) = listener.accept().unwrap();
                read_request(&mut stream).unwrap().expect("a request");
                served += 1;
                let answer = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                stream.write_all(answer.as_bytes()).unwrap();
            }
            served
        });
        (addr, server)
    }

    #[test]
    fn the_dev_proxys_own_503_is_sent_again_and_nothing_else_is() {
        let post = Request::new("POST", "/p").body(b"{}".to_vec());
        // The proxy's 503 twice, then the worker's answer: three sends, the last answer.
        let (addr, server) = serve(vec![
            (503, "text/plain", DEV_PROXY_503),
            (503, "text/plain", DEV_PROXY_503),
            (201, "application/json", "{}"),
        ]);
        assert_eq!(send_past_dev_proxy(addr, &post).unwrap().status, 201);
        assert_eq!(server.join().unwrap(), 3);
        // Three times at most: the third 503 is what the test gets.
        let (addr, server) = serve(vec![(503, "text/plain", DEV_PROXY_503); 3]);
        assert_eq!(send_past_dev_proxy(addr, &post).unwrap().status, 503);
        assert_eq!(server.join().unwrap(), 3);
        // The worker's own 503 (problem+json) is an answer, never sent again.
        let (addr, server) = serve(vec![(503, "application/problem+json", r#"{"status":503}"#)]);
        assert_eq!(send_past_dev_proxy(addr, &post).unwrap().status, 503);
        assert_eq!(server.join().unwrap(), 1);
    }
}

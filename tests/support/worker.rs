//! Runs the built worker in real workerd through `wrangler dev` (local mode).
//!
//! Each instance gets its own ports, its own `--persist-to` directory and a log file with
//! wrangler's stdout and stderr. A bash supervisor starts wrangler with `setsid` (so wrangler
//! leads a process group that also holds workerd) and kills that group as soon as the test
//! process is gone, so no process outlives the test binary.
//!
//! For crash tests, [`Worker::crash`] kills the whole group with SIGKILL (wrangler and
//! workerd die at once, as in a power cut) and [`Worker::restart`] starts it again on the
//! same ports and the same `--persist-to` state.

use super::http::{Request, Response};
use std::fs;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, Once, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// How long an instance may take to become ready (the first start may be slow).
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(300);

/// What proves that an instance is ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// A GET through the worker is answered by the test origin (`x-origin-execution`).
    OriginAnswers,
    /// Any HTTP response from the worker (its origin is down on purpose).
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
pub type HttpsProbe = Box<dyn Fn(SocketAddr) -> Result<bool, String> + Send + Sync>;

/// Serve over HTTPS (`--local-protocol https`) with the test's own key and certificate.
/// This harness speaks plain HTTP only, so the test proves readiness with `probe`: `Ok(true)`
/// once a request through the worker is answered by the origin, `Ok(false)` or `Err(why)`
/// while it is not.
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
    https_probe: Option<HttpsProbe>,
}

/// The worker's directory: this package's, or the workspace root when a member crate
/// (client/) includes this support code.
pub fn repo_root() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    dir.ancestors().find(|d| d.join("wrangler.toml").exists()).map(Path::to_path_buf).unwrap_or(dir)
}

/// Panics unless the build output and wrangler are in place.
pub fn require_build() {
    let root = repo_root();
    let shim = root.join("build/worker/shim.mjs");
    let wrangler = root.join("node_modules/.bin/wrangler");
    let mut missing = Vec::new();
    if !shim.exists() {
        missing.push(shim.display().to_string());
    }
    if !wrangler.exists() {
        missing.push(wrangler.display().to_string());
    }
    if !missing.is_empty() {
        panic!(
            "end-to-end tests need the built worker and wrangler, but {} missing: {}. \
             Run ./scripts/test.sh (it installs the toolchain, builds the worker and runs the tests).",
            if missing.len() == 1 { "this is" } else { "these are" },
            missing.join(", ")
        );
    }
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("bind 127.0.0.1:0")
}

fn temp_base() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("e2e")
}

/// Removes run directories left by earlier test processes that are gone.
fn clean_stale_dirs() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let Ok(entries) = fs::read_dir(temp_base()) else { return };
        for entry in entries.flatten() {
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

impl Worker {
    pub fn start(config: WorkerConfig) -> Result<Worker, String> {
        Worker::start_with(config, None, &[], None)
    }

    /// Starts the built worker with more `wrangler dev` arguments (e.g. `--local-upstream`).
    pub fn start_with_args(config: WorkerConfig, extra: &[&str]) -> Result<Worker, String> {
        Worker::start_with(config, None, extra, None)
    }

    /// Starts the built worker serving HTTPS (see [`Https`]).
    pub fn start_https(config: WorkerConfig, https: Https) -> Result<Worker, String> {
        Worker::start_with(config, None, &[], Some(https))
    }

    /// Starts the built worker under a wrangler configuration of the test's own (written to
    /// the instance's directory; `{MAIN}` in it is replaced by the built shim's path).
    pub fn start_with_config(config: WorkerConfig, wrangler_toml: &str) -> Result<Worker, String> {
        Worker::start_with(config, Some(wrangler_toml), &[], None)
    }

    fn start_with(
        config: WorkerConfig,
        wrangler_toml: Option<&str>,
        extra: &[&str],
        https: Option<Https>,
    ) -> Result<Worker, String> {
        require_build();
        clean_stale_dirs();
        let _guard = START_LOCK.lock().unwrap_or_else(|e| e.into_inner());

        let root = repo_root();
        let dir = temp_base().join(format!("run-{}-{}", std::process::id(), config.name));
        let _ = fs::remove_dir_all(&dir);
        let state = dir.join("state");
        fs::create_dir_all(&state).map_err(|e| format!("create {}: {e}", state.display()))?;
        let log = dir.join("wrangler.log");
        let pid_file = dir.join("wrangler.pid");

        let port = free_port();
        let mut inspector_port = free_port();
        while inspector_port == port {
            inspector_port = free_port();
        }
        let mut args: Vec<String> = vec![
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
        ];
        if let Some(toml) = wrangler_toml {
            let main = root.join("build/worker/shim.mjs");
            let file = dir.join("wrangler.toml");
            fs::write(&file, toml.replace("{MAIN}", &main.display().to_string()))
                .map_err(|e| format!("write {}: {e}", file.display()))?;
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
            https_probe,
        };
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
        let child = spawn_supervisor(&self.log, &self.pid_file, &self.state, &args)?;
        *self.supervisor.lock().unwrap() = child;
        self.wait_ready(readiness)
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
            if let Some(probe) = &self.https_probe {
                match probe(self.addr) {
                    Ok(true) => return Ok(()),
                    Ok(false) => last = "not ready".into(),
                    Err(e) => last = e,
                }
                thread::sleep(Duration::from_millis(250));
                continue;
            }
            let probe = Request::get("/__e2e/ready").timeout(Duration::from_secs(10)).send(self.addr);
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

    /// Sends a request to this worker; panics (with the log tail) when no response comes.
    pub fn send(&self, request: &Request) -> Response {
        match request.send(self.addr) {
            Ok(r) => r,
            Err(e) => panic!(
                "{} {} to worker '{}' got no response: {e}. Worker log tail:\n{}",
                request.method,
                request.path,
                self.name,
                self.log_tail(40)
            ),
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
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

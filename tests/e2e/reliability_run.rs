//! The reliability run (`./scripts/reliability.sh`): mixed traffic against the built worker
//! in real workerd, with faults injected along the way, then a summary.
//!
//! Phases, all against one instance and its own test origin:
//! 1. Mixed load: normal keys with concurrent duplicates, final 400/500 answers, and the
//!    first attempts of fault keys (reset after send, origin timeout, stalled body, 503 and
//!    429 with Retry-After); the hostile inputs run alongside.
//! 2. Refused: the origin stops listening; first attempts of more keys are refused.
//! 3. Crash: first attempts of more keys are at the (slow) origin when wrangler and workerd
//!    are killed with SIGKILL; the instance restarts on the same `--persist-to` state.
//! 4. Retries of every fault key, with duplicates, and new keys after the restart.
//! 5. Verification: every key once more, and the origin's execution counts.
//!
//! The run fails unless there are no duplicate executions, no lost outcomes (every request
//! answered, except the ones the SIGKILL cut, and every stored answer replayed unchanged),
//! no unexpected answers, and every hostile input refused correctly.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::assert::{is_problem, problem_kind};
use crate::support::hostile::bad_inputs;
use crate::support::http::{Request, Response};
use crate::support::origin::Origin;
use crate::support::requests::{covered, new_key, unique};
use crate::support::rng::{self, Rng};
use crate::support::worker::{repo_root, send_past_dev_proxy, Readiness, Worker, WorkerConfig};

/// Long enough that a normal key's exchange ends well within it on a loaded machine (the
/// e2e suite alone has driven a 2-core machine's load average near 100, and 3 s timed out
/// plain payments); the timeout faults hold their origin 3 s past it.
const ORIGIN_TIMEOUT_SECONDS: u64 = 10;
const MAX_BODY_BYTES: usize = 4096;
const CONNECTIONS: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    Normal,
    Final400,
    Final500,
    Reset,
    Timeout,
    StalledBody,
    Status503,
    Status429,
    Refused,
    InFlightAtCrash,
}

impl Kind {
    /// Executions the origin must see for one key of this kind, in the whole run.
    fn expected_executions(self) -> usize {
        match self {
            // The released attempt, then the retry that executes.
            Kind::Status503 | Kind::Status429 => 2,
            // The refused attempt never reached the origin; the retry executes.
            _ => 1,
        }
    }

    fn fault(self) -> Option<&'static str> {
        match self {
            Kind::Reset => Some("reset after send"),
            Kind::Timeout => Some("origin timeout"),
            Kind::StalledBody => Some("stalled body"),
            Kind::Status503 => Some("503 + Retry-After"),
            Kind::Status429 => Some("429 + Retry-After"),
            Kind::Refused => Some("connection refused"),
            _ => None,
        }
    }

    fn unknown(self) -> bool {
        matches!(self, Kind::Reset | Kind::Timeout | Kind::StalledBody)
    }
}

struct Key {
    key: String,
    path: String,
    body: String,
    kind: Kind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Mixed,
    Refused,
    Crash,
    Retries,
    Verify,
}

#[derive(Clone)]
struct Job {
    key: usize,
    phase: Phase,
    headers: Vec<(&'static str, String)>,
    timeout: Duration,
}

struct Sent {
    job: Job,
    answer: Result<Response, String>,
}

fn request(k: &Key, job: &Job) -> Request {
    let mut req = covered("POST", &k.path, &k.key, &k.body).timeout(job.timeout);
    for (name, value) in &job.headers {
        req = req.header(name, value);
    }
    req
}

/// Sends every job over `CONNECTIONS` connections at once, in the given order.
fn run_jobs(addr: std::net::SocketAddr, keys: &Arc<Vec<Key>>, jobs: Vec<Job>) -> Vec<Sent> {
    let jobs = Arc::new(jobs);
    let next = Arc::new(AtomicUsize::new(0));
    let sent = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let (jobs, next, sent, keys) = (jobs.clone(), next.clone(), sent.clone(), keys.clone());
            thread::spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(job) = jobs.get(i) else { break };
                let answer =
                    send_past_dev_proxy(addr, &request(&keys[job.key], job)).map_err(|e| e.to_string());
                sent.lock().unwrap().push(Sent { job: job.clone(), answer });
            })
        })
        .collect();
    for t in threads {
        t.join().expect("load thread");
    }
    let mut sent = sent.lock().unwrap();
    std::mem::take(&mut *sent)
}

fn job(key: usize, phase: Phase, headers: Vec<(&'static str, String)>) -> Job {
    Job { key, phase, headers, timeout: Duration::from_secs(120) }
}

/// What an answer is, for the checks and for failure messages.
enum Seen {
    /// The origin's answer (live or replayed).
    Outcome {
        status: u16,
        replayed: bool,
    },
    /// The worker's problem.
    Problem(u16, String),
    Other(u16),
}

impl std::fmt::Debug for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Seen::Outcome { status, replayed } => write!(f, "the origin's {status} (replayed: {replayed})"),
            Seen::Problem(status, kind) => write!(f, "{status} {kind}"),
            Seen::Other(status) => write!(f, "HTTP {status}, neither the origin's nor a problem"),
        }
    }
}

fn seen(r: &Response) -> Seen {
    if r.has_header("x-origin-execution") {
        Seen::Outcome { status: r.status, replayed: r.is_replayed() }
    } else if is_problem(r) {
        Seen::Problem(r.status, problem_kind(r).unwrap_or_default())
    } else {
        Seen::Other(r.status)
    }
}

/// Whether an answer is one this kind of key may get in this phase.
fn acceptable(kind: Kind, phase: Phase, s: &Seen) -> bool {
    let problem = |status: u16, name: &str| matches!(s, Seen::Problem(st, k) if *st == status && k == name);
    let outcome = |status: u16| matches!(s, Seen::Outcome { status: st, .. } if *st == status);
    match (kind, phase) {
        (Kind::Normal, _) => outcome(201),
        (Kind::Final400, _) => outcome(400),
        (Kind::Final500, _) => outcome(500),
        (k, _) if k.unknown() => problem(502, "outcome-unknown"),
        (Kind::Status503, Phase::Mixed) => matches!(s, Seen::Outcome { status: 503, replayed: false }),
        (Kind::Status429, Phase::Mixed) => matches!(s, Seen::Outcome { status: 429, replayed: false }),
        (Kind::Refused, Phase::Refused) => problem(502, "origin-unreachable"),
        (Kind::Status503 | Kind::Status429 | Kind::Refused, _) => outcome(201),
        // The origin held these attempts until the crash cut them: none may get an answer
        // in the crash phase. The orphaned claim: in progress until its lease ends, unknown
        // afterwards.
        (Kind::InFlightAtCrash, Phase::Crash) => false,
        (Kind::InFlightAtCrash, _) => problem(409, "in-progress") || problem(502, "outcome-unknown"),
        _ => false,
    }
}

#[test]
fn reliability_run() {
    let mut run = Run::start();
    run.mixed_load();
    run.origin_refuses();
    run.crash_with_attempts_in_flight();
    run.retries_and_new_keys();
    run.verify_every_key();
    let tally = run.tally();
    tally.report();
    tally.assert_clean();
}

/// One run: its instance, its origin, its keys and everything sent so far.
struct Run {
    started: Instant,
    seed: u64,
    rng: Rng,
    origin: Origin,
    w: Worker,
    keys: Arc<Vec<Key>>,
    /// Keys first used after the restart.
    after_restart: Vec<usize>,
    sent: Vec<Sent>,
    faults: HashMap<&'static str, usize>,
    hostile: Hostile,
    crash: Crash,
}

/// The hostile inputs sent alongside the mixed load.
#[derive(Default)]
struct Hostile {
    tried: usize,
    failures: Vec<String>,
}

/// What the SIGKILL cut.
#[derive(Default)]
struct Crash {
    keys: Vec<usize>,
    cut_keys: Vec<usize>,
}

impl Run {
    fn start() -> Run {
        let started = Instant::now();
        let seed = rng::seed();
        let mut rng = Rng::new(seed);
        let origin = Origin::start();
        let w = Worker::start(WorkerConfig {
            name: "reliability-run".into(),
            vars: [
                ("ORIGIN_URL", origin.url()),
                ("IDEMPOTENCY_TTL_SECONDS", "600".to_string()),
                ("DUPLICATE_WAIT_SECONDS", "30".to_string()),
                ("ORIGIN_TIMEOUT_SECONDS", ORIGIN_TIMEOUT_SECONDS.to_string()),
                ("MAX_BODY_BYTES", MAX_BODY_BYTES.to_string()),
                ("SCOPE_HEADER", "Authorization".to_string()),
            ]
            .into_iter()
            .map(|(n, v)| (n.to_string(), v))
            .collect(),
            readiness: Readiness::OriginAnswers,
        })
        .unwrap_or_else(|e| panic!("{e}"));

        let plan: &[(Kind, usize)] = &[
            (Kind::Normal, 250),
            (Kind::Final400, 10),
            (Kind::Final500, 10),
            (Kind::Reset, 10),
            (Kind::Timeout, 6),
            (Kind::StalledBody, 6),
            (Kind::Status503, 10),
            (Kind::Status429, 8),
            (Kind::Refused, 8),
            (Kind::InFlightAtCrash, 6),
            // Normal keys first used after the restart.
            (Kind::Normal, 80),
        ];
        let mut keys = Vec::new();
        let mut after_restart = Vec::new();
        for (i, &(kind, n)) in plan.iter().enumerate() {
            for _ in 0..n {
                if i == plan.len() - 1 {
                    after_restart.push(keys.len());
                }
                keys.push(Key {
                    key: new_key(),
                    path: format!("/v1/charges/{}", unique("c")),
                    body: format!(r#"{{"amount":{},"currency":"eur"}}"#, 100 + rng.below(100_000)),
                    kind,
                });
            }
        }
        Run {
            started,
            seed,
            rng,
            origin,
            w,
            keys: Arc::new(keys),
            after_restart,
            sent: Vec::new(),
            faults: HashMap::new(),
            hostile: Hostile::default(),
            crash: Crash::default(),
        }
    }

    /// The keys of a kind used before the restart.
    fn of_kind(&self, kind: Kind) -> Vec<usize> {
        (0..self.keys.len())
            .filter(|&i| self.keys[i].kind == kind && !self.after_restart.contains(&i))
            .collect()
    }

    fn delay(&mut self) -> (&'static str, String) {
        ("x-test-delay-ms", (20 + self.rng.below(60)).to_string())
    }

    fn send(&mut self, jobs: Vec<Job>) {
        let sent = run_jobs(self.w.addr, &self.keys, jobs);
        self.sent.extend(sent);
    }

    fn count_fault(&mut self, kind: Kind, n: usize) {
        *self.faults.entry(kind.fault().expect("a fault kind")).or_default() += n;
    }

    /// Phase 1: mixed load, with the hostile inputs alongside.
    fn mixed_load(&mut self) {
        let bad = bad_inputs(MAX_BODY_BYTES);
        self.hostile.tried = bad.len();
        let bad_thread = {
            let (addr, origin) = (self.w.addr, self.origin.clone());
            thread::spawn(move || {
                bad.iter().filter_map(|case| case.check(addr, &origin).err()).collect::<Vec<_>>()
            })
        };
        let mut jobs = Vec::new();
        for kind in [Kind::Normal, Kind::Final400, Kind::Final500] {
            for k in self.of_kind(kind) {
                for _ in 0..2 + self.rng.below(5) {
                    let mut headers = vec![self.delay()];
                    match kind {
                        Kind::Final400 => headers.push(("x-test-status", "400".into())),
                        Kind::Final500 => headers.push(("x-test-status", "500".into())),
                        _ => {}
                    }
                    jobs.push(job(k, Phase::Mixed, headers));
                }
            }
        }
        let slow = ((ORIGIN_TIMEOUT_SECONDS + 3) * 1000).to_string();
        for kind in [Kind::Reset, Kind::Timeout, Kind::StalledBody, Kind::Status503, Kind::Status429] {
            for k in self.of_kind(kind) {
                let headers = match kind {
                    Kind::Reset => vec![("x-test-reset", "1".to_string()), self.delay()],
                    Kind::Timeout => vec![("x-test-delay-ms", slow.clone())],
                    Kind::StalledBody => vec![("x-test-stall-body-ms", slow.clone())],
                    Kind::Status503 => {
                        vec![("x-test-status", "503".into()), ("x-test-retry-after", "1".into())]
                    }
                    _ => vec![("x-test-status", "429".into()), ("x-test-retry-after", "1".into())],
                };
                jobs.push(job(k, Phase::Mixed, headers));
                self.count_fault(kind, 1);
            }
        }
        self.rng.shuffle(&mut jobs);
        self.send(jobs);
        self.hostile.failures = bad_thread.join().expect("hostile input thread");
    }

    /// Phase 2: the origin refuses connections (nothing else is in flight).
    fn origin_refuses(&mut self) {
        self.origin.stop();
        let jobs: Vec<Job> =
            self.of_kind(Kind::Refused).into_iter().map(|k| job(k, Phase::Refused, vec![])).collect();
        self.count_fault(Kind::Refused, jobs.len());
        self.send(jobs);
        self.origin.resume().expect("the origin listens again");
    }

    /// Phase 3: SIGKILL while the origin holds first attempts, then restart on the same
    /// state.
    fn crash_with_attempts_in_flight(&mut self) {
        let seed = self.seed;
        let crash_keys = self.of_kind(Kind::InFlightAtCrash);
        let gate = self.origin.gate();
        let in_flight = {
            let jobs: Vec<Job> = crash_keys
                .iter()
                .map(|&k| {
                    job(
                        k,
                        Phase::Crash,
                        vec![(crate::support::origin::Gate::HEADER, gate.name().to_string())],
                    )
                })
                .collect();
            let (addr, keys) = (self.w.addr, self.keys.clone());
            thread::spawn(move || run_jobs(addr, &keys, jobs))
        };
        assert!(
            gate.wait_arrived(crash_keys.len(), Duration::from_secs(120)),
            "the in-flight attempts never reached the origin (TEST_SEED={seed:#x})"
        );
        self.w.crash();
        let cut = in_flight.join().expect("in-flight thread");
        gate.release();
        self.crash.cut_keys = cut.iter().filter(|s| s.answer.is_err()).map(|s| s.job.key).collect();
        self.crash.keys = crash_keys;
        self.sent.extend(cut.into_iter().filter(|s| s.answer.is_ok()));
        self.w.restart(Readiness::OriginAnswers).unwrap_or_else(|e| panic!("restart: {e}"));
        *self.faults.entry("restart (SIGKILL)").or_default() += 1;
    }

    /// Phase 4: retries of every fault key with duplicates, and new keys after the restart.
    fn retries_and_new_keys(&mut self) {
        let mut jobs = Vec::new();
        for kind in [
            Kind::Reset,
            Kind::Timeout,
            Kind::StalledBody,
            Kind::Status503,
            Kind::Status429,
            Kind::Refused,
            Kind::InFlightAtCrash,
        ] {
            for k in self.of_kind(kind) {
                for _ in 0..2 + self.rng.below(3) {
                    let delay = self.delay();
                    jobs.push(job(k, Phase::Retries, vec![delay]));
                }
            }
        }
        for k in self.after_restart.clone() {
            for _ in 0..1 + self.rng.below(5) {
                let delay = self.delay();
                jobs.push(job(k, Phase::Retries, vec![delay]));
            }
        }
        self.rng.shuffle(&mut jobs);
        self.send(jobs);
    }

    /// Phase 5: every key once more.
    fn verify_every_key(&mut self) {
        let jobs: Vec<Job> = (0..self.keys.len()).map(|k| job(k, Phase::Verify, vec![])).collect();
        self.send(jobs);
    }

    /// Everything the checks need, counted from what was sent and what the origin saw.
    fn tally(self) -> Tally {
        let Run { started, seed, origin, keys, sent, faults, hostile, crash, w, .. } = self;
        let cut_by_crash = crash.cut_keys.len();
        let requests = sent.len() + cut_by_crash + hostile.tried;
        let mut per_key = vec![0usize; keys.len()];
        for s in &sent {
            per_key[s.job.key] += 1;
        }
        for &k in &crash.cut_keys {
            per_key[k] += 1;
        }
        let sends_per_key =
            (per_key.iter().min().copied().unwrap_or(0), per_key.iter().max().copied().unwrap_or(0));

        let mut unanswered = Vec::new();
        let mut unexpected = Vec::new();
        let mut by_key: HashMap<usize, Vec<(Phase, Response)>> = HashMap::new();
        for s in sent {
            let k = &keys[s.job.key];
            match s.answer {
                Err(e) => {
                    unanswered.push(format!("{:?} key #{} in {:?}: {e}", k.kind, s.job.key, s.job.phase))
                }
                Ok(r) => {
                    let what = seen(&r);
                    if !acceptable(k.kind, s.job.phase, &what) {
                        unexpected
                            .push(format!("{:?} key #{} in {:?}: {what:?}", k.kind, s.job.key, s.job.phase));
                    }
                    by_key.entry(s.job.key).or_default().push((s.job.phase, r));
                }
            }
        }
        let divergent = divergent_answers(&keys, &by_key);

        let mut duplicate_executions = 0;
        let mut execution_mismatches = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            let n = origin.executions(&k.key);
            let expected = k.kind.expected_executions();
            duplicate_executions += n.saturating_sub(expected);
            if n != expected {
                execution_mismatches
                    .push(format!("{:?} key #{i}: {n} executions, expected {expected}", k.kind));
            }
        }
        // The retries of the cut attempts: in progress while the orphaned claims' leases
        // ran, unknown after.
        let after_crash = |status: u16| {
            crash
                .keys
                .iter()
                .filter_map(|k| by_key.get(k))
                .flatten()
                .filter(|(phase, r)| *phase != Phase::Crash && r.status == status && is_problem(r))
                .count()
        };
        let (crash_in_progress, crash_unknown) = (after_crash(409), after_crash(502));
        drop(w);
        Tally {
            seed,
            elapsed: started.elapsed(),
            requests,
            keys: keys.len(),
            sends_per_key,
            faults,
            crash_keys: crash.keys.len(),
            cut_by_crash,
            crash_in_progress,
            crash_unknown,
            duplicate_executions,
            execution_mismatches,
            unanswered,
            divergent,
            unexpected,
            hostile,
            origin_executions: origin.total(),
        }
    }
}

/// A stored answer (any final origin answer) must be the only one the key ever gives,
/// through the last verification.
fn divergent_answers(keys: &[Key], by_key: &HashMap<usize, Vec<(Phase, Response)>>) -> Vec<String> {
    let mut divergent = Vec::new();
    for (k, answers) in by_key {
        let finals: Vec<&Response> = answers
            .iter()
            .map(|(_, r)| r)
            .filter(|r| r.has_header("x-origin-execution") && !matches!(r.status, 503 | 429))
            .collect();
        if let Some(first) = finals.first() {
            if finals.iter().any(|r| r.status != first.status || r.body != first.body) {
                divergent.push(format!("{:?} key #{k}: its stored answer changed", keys[*k].kind));
            }
            let last = &answers.iter().rev().find(|(p, _)| *p == Phase::Verify);
            match last {
                Some((_, r)) if r.body == first.body && r.is_replayed() => {}
                _ => divergent.push(format!("{:?} key #{k}: not replayed at the end", keys[*k].kind)),
            }
        }
    }
    divergent
}

/// The run's counts, for the summary and the checks.
struct Tally {
    seed: u64,
    elapsed: Duration,
    requests: usize,
    keys: usize,
    sends_per_key: (usize, usize),
    faults: HashMap<&'static str, usize>,
    crash_keys: usize,
    cut_by_crash: usize,
    crash_in_progress: usize,
    crash_unknown: usize,
    duplicate_executions: usize,
    execution_mismatches: Vec<String>,
    unanswered: Vec<String>,
    divergent: Vec<String>,
    unexpected: Vec<String>,
    hostile: Hostile,
    origin_executions: usize,
}

impl Tally {
    fn lost(&self) -> usize {
        self.unanswered.len() + self.divergent.len()
    }

    fn summary(&self) -> String {
        let fault_total: usize = self.faults.values().sum();
        let mut fault_list: Vec<_> = self.faults.iter().collect();
        fault_list.sort();
        let (fewest, most) = self.sends_per_key;
        let mut summary = String::new();
        let _ = writeln!(summary, "reliability run (TEST_SEED={:#x})", self.seed);
        let _ = writeln!(summary, "  requests sent          {}", self.requests);
        let _ =
            writeln!(summary, "  keys                   {} (each sent {fewest} to {most} times)", self.keys);
        let _ = writeln!(
            summary,
            "  faults injected        {fault_total}: {}",
            fault_list.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
        );
        let _ = writeln!(
            summary,
            "  cut by the SIGKILL     {} requests; their retries got {} x 409 in-progress, {} x 502 outcome-unknown",
            self.cut_by_crash, self.crash_in_progress, self.crash_unknown
        );
        let _ = writeln!(summary, "  duplicate executions   {}", self.duplicate_executions);
        let _ = writeln!(
            summary,
            "  lost outcomes          {} ({} unanswered, {} stored answers not replayed unchanged)",
            self.lost(),
            self.unanswered.len(),
            self.divergent.len()
        );
        let _ = writeln!(summary, "  unexpected answers     {}", self.unexpected.len());
        let _ = writeln!(
            summary,
            "  bad inputs             {} tried, {} refused correctly",
            self.hostile.tried,
            self.hostile.tried - self.hostile.failures.len()
        );
        let _ = writeln!(summary, "  origin executions      {}", self.origin_executions);
        let _ = write!(summary, "  time                   {:.0} s", self.elapsed.as_secs_f64());
        summary
    }

    /// Prints the summary and keeps it in `target/reliability/latest.txt`, with the first
    /// findings of each kind: a run can be ended before its assertion's message is shown
    /// (the suite's watchdog ends the whole test process when another test overruns, and
    /// the test harness prints a failure's message only at the end), so the file is where
    /// what went wrong stays readable.
    fn report(&self) {
        let summary = self.summary();
        println!("{summary}");
        let mut kept = format!("{summary}\n");
        for (what, found) in self.findings() {
            if !found.is_empty() {
                let _ = write!(kept, "\n{what} ({}):\n{}\n", found.len(), self.show(found));
            }
        }
        let out = repo_root().join("target/reliability");
        let _ = std::fs::create_dir_all(&out);
        let _ = std::fs::write(out.join("latest.txt"), kept);
    }

    /// Each kind of finding the run fails on, named as its assertion names it.
    fn findings(&self) -> [(&'static str, &[String]); 5] {
        [
            ("execution counts", &self.execution_mismatches),
            ("unanswered", &self.unanswered),
            ("stored answers not replayed unchanged", &self.divergent),
            ("unexpected answers", &self.unexpected),
            ("hostile inputs not refused correctly", &self.hostile.failures),
        ]
    }

    /// The first 20 of `found`, and how to replay the run.
    fn show(&self, found: &[String]) -> String {
        let mut shown = found.iter().take(20).cloned().collect::<Vec<_>>().join("\n");
        shown.push_str(&format!("\n(replay with TEST_SEED={:#x})", self.seed));
        shown
    }

    fn assert_clean(&self) {
        let summary = self.summary();
        let show = |v: &[String]| self.show(v);
        // The crash must have cut every held attempt, and their retries must have met the
        // orphaned claims: else the run proved nothing about crashes.
        assert_eq!(self.cut_by_crash, self.crash_keys, "the SIGKILL cut every held attempt:\n{summary}");
        assert!(
            self.crash_in_progress + self.crash_unknown >= self.crash_keys,
            "the retries of the cut attempts got 409 in-progress or outcome-unknown:\n{summary}"
        );
        assert_eq!(
            self.duplicate_executions,
            0,
            "duplicate executions:\n{}",
            show(&self.execution_mismatches)
        );
        assert!(
            self.execution_mismatches.is_empty(),
            "execution counts:\n{}",
            show(&self.execution_mismatches)
        );
        assert_eq!(self.lost(), 0, "lost outcomes:\n{}\n{}", show(&self.unanswered), show(&self.divergent));
        assert!(self.unexpected.is_empty(), "unexpected answers:\n{}", show(&self.unexpected));
        assert!(
            self.hostile.failures.is_empty(),
            "hostile inputs not refused correctly:\n{}",
            show(&self.hostile.failures)
        );
    }
}

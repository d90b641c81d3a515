// Process figures from /proc: CPU time (utime + stime, every thread) and resident memory,
// and which of our workerd processes listens on a given port.
import fs from "node:fs";

export const CLOCK_TICKS_PER_SECOND = 100; // Linux USER_HZ; /proc/<pid>/stat counts in these

/** CPU time of a process in milliseconds (user + system, all threads). */
export function cpuMs(pid) {
  let stat;
  try {
    stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    throw new Error(`process ${pid} is gone (did workerd restart or exit?)`);
  }
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // fields[0] is field 3 (state); utime is field 14, stime field 15.
  const ticks = Number(fields[11]) + Number(fields[12]);
  return (ticks * 1000) / CLOCK_TICKS_PER_SECOND;
}

/** Resident set size in KiB. */
export function rssKiB(pid) {
  const status = fs.readFileSync(`/proc/${pid}/status`, "utf8");
  const match = status.match(/^VmRSS:\s+(\d+)\s+kB/m);
  return match ? Number(match[1]) : NaN;
}

function parentOf(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
  } catch {
    return 0;
  }
}

/** Every workerd process that descends from this node process. */
export function ourWorkerdPids() {
  const pids = [];
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let comm;
    try {
      comm = fs.readFileSync(`/proc/${entry}/comm`, "utf8").trim();
    } catch {
      continue;
    }
    if (comm !== "workerd") continue;
    for (let p = Number(entry), hops = 0; p > 1 && hops < 10; p = parentOf(p), hops++) {
      if (p === process.pid) {
        pids.push(Number(entry));
        break;
      }
    }
  }
  return pids;
}

function listeningInodes(port) {
  const inodes = new Set();
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text;
    try {
      text = fs.readFileSync(file, "utf8");
    } catch {
      continue;
    }
    for (const line of text.split("\n").slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols.length < 10) continue;
      const localPort = parseInt(cols[1].split(":")[1], 16);
      if (localPort === port && cols[3] === "0A") inodes.add(cols[9]);
    }
  }
  return inodes;
}

/** The pid (among `candidates`) that holds the listening socket on `port`. */
export function pidListeningOn(port, candidates = ourWorkerdPids()) {
  const inodes = listeningInodes(port);
  for (const pid of candidates) {
    let fds;
    try {
      fds = fs.readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      let link;
      try {
        link = fs.readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        continue;
      }
      const match = link.match(/^socket:\[(\d+)\]$/);
      if (match && inodes.has(match[1])) return pid;
    }
  }
  return null;
}

/** Waits until `pids` use less than `quietMs` CPU per `windowMs`, at most `maxMs`. */
export async function settle(pids, { windowMs = 300, quietMs = 10, maxMs = 4000 } = {}) {
  const total = () => pids.reduce((sum, pid) => sum + cpuMs(pid), 0);
  const start = Date.now();
  let last = total();
  while (Date.now() - start < maxMs) {
    await new Promise((resolve) => setTimeout(resolve, windowMs));
    const now = total();
    if (now - last <= quietMs) return Date.now() - start;
    last = now;
  }
  return Date.now() - start;
}

/** CPU ms of every process that does not descend from this one (other users of the machine). */
export function othersCpuSnapshot() {
  const snapshot = new Map();
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    let ours = false;
    for (let p = pid, hops = 0; p > 1 && hops < 12; p = parentOf(p), hops++) {
      if (p === process.pid) {
        ours = true;
        break;
      }
    }
    if (ours) continue;
    try {
      snapshot.set(pid, { cpu: cpuMs(pid), comm: fs.readFileSync(`/proc/${pid}/comm`, "utf8").trim() });
    } catch {}
  }
  return snapshot;
}

/** CPU seconds other processes used between two snapshots (those alive at the end), by command. */
export function othersCpuBetween(before, after) {
  const byComm = {};
  let total = 0;
  for (const [pid, { cpu, comm }] of after) {
    const delta = cpu - (before.get(pid)?.cpu ?? 0);
    if (delta <= 0) continue;
    total += delta;
    byComm[comm] = (byComm[comm] ?? 0) + delta;
  }
  const top = Object.entries(byComm)
    .sort((a, b) => b[1] - a[1])
    .slice(0, 6)
    .map(([comm, ms]) => ({ comm, seconds: Math.round(ms / 100) / 10 }));
  return { seconds: Math.round(total / 100) / 10, top };
}

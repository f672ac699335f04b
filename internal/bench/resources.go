package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// cpuSnap is the CPU time used so far by the machine and by each of the
// bench's processes (the bench itself with its load generator and
// receiver, the api, the dispatchers, and the Postgres server).
type cpuSnap struct {
	at      time.Time
	machine float64
	byPID   map[int]float64
	role    map[int]string
	// sleeps are each dispatcher's voluntary context switches so far, all
	// its threads summed: each is a thread going to sleep (waiting for the
	// network, a timer or another thread) and later woken.
	sleeps map[int]int64
}

// dispatcherSleeps is the dispatchers' voluntary context switches between
// two snapshots; like cpuUsage, a process that exited in between is not
// counted and one that started counts from zero.
func dispatcherSleeps(a, z cpuSnap) int64 {
	var n int64
	for pid, v := range z.sleeps {
		n += max(v-a.sleeps[pid], 0)
	}
	return n
}

// cpuSnapshot reads the CPU times of every process of the stage.
func (b *bench) cpuSnapshot(s *stage) cpuSnap {
	snap := cpuSnap{at: time.Now(), machine: machineBusySeconds(), byPID: map[int]float64{}, role: map[int]string{}, sleeps: map[int]int64{}}
	add := func(pid int, role string) {
		snap.byPID[pid] = cpuSeconds(pid)
		snap.role[pid] = role
	}
	add(os.Getpid(), "bench")
	if s != nil && s.api != nil {
		add(s.api.pid(), "api")
	}
	if s != nil {
		for _, a := range s.moreAPIs {
			add(a.pid(), "api")
		}
	}
	if s != nil {
		for _, d := range s.dispatchers {
			add(d.pid(), "dispatcher")
			snap.sleeps[d.pid()] = threadSleeps(d.pid())
		}
	}
	if pm := b.pg.postmasterPID(); pm != 0 {
		add(pm, "postgres")
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if ppid, ut, st, ok := procStat(pid); ok && ppid == pm {
				snap.byPID[pid] = float64(ut+st) / clockTicks
				snap.role[pid] = "postgres"
			}
		}
	}
	return snap
}

// cpuReport is the average number of cores each party used during a probe;
// other is everything on the machine that is not the bench's.
type cpuReport struct {
	Postgres   float64 `json:"postgres"`
	API        float64 `json:"api"`
	Dispatcher float64 `json:"dispatcher"`
	Bench      float64 `json:"bench"`
	Other      float64 `json:"other"`
	Busy       float64 `json:"busy"`
	Cores      int     `json:"cores"`
}

// cpuUsage returns the cores used between two snapshots. A process that
// exited in between is not counted; one that started counts from zero.
func cpuUsage(a, z cpuSnap) cpuReport {
	secs := z.at.Sub(a.at).Seconds()
	r := cpuReport{Cores: numCPU()}
	if secs <= 0 {
		return r
	}
	by := map[string]float64{}
	for pid, t := range z.byPID {
		by[z.role[pid]] += max(t-a.byPID[pid], 0)
	}
	r.Postgres = round2(by["postgres"] / secs)
	r.API = round2(by["api"] / secs)
	r.Dispatcher = round2(by["dispatcher"] / secs)
	r.Bench = round2(by["bench"] / secs)
	r.Busy = round2((z.machine - a.machine) / secs)
	r.Other = round2(math.Max(r.Busy-r.Postgres-r.API-r.Dispatcher-r.Bench, 0))
	return r
}

// postgresConnection names whose work a PostgreSQL process does: a client
// backend by its application_name (hookd-api for an api's pool,
// hookd-dispatcher and hookd-locks for a dispatcher's pool and leader
// locks, hookd-ledger for its ledger's connections, bench for the
// bench's own reads), the server's own processes (autovacuum, the WAL
// writer, the checkpointer, the postmaster) as background.
func postgresConnection(backendType, app string) string {
	if backendType != "client backend" {
		return "background"
	}
	for _, c := range []struct{ prefix, name string }{
		{"hookd-api", "api"}, {"hookd-ledger", "ledger"}, {"hookd-dispatcher", "dispatcher"},
		{"hookd-locks", "dispatcher"}, {"bench", "bench"},
	} {
		if strings.HasPrefix(app, c.prefix) {
			return c.name
		}
	}
	return "other"
}

// postgresCPUByConnection is the CPU seconds PostgreSQL's processes spent
// between two snapshots, by postgresConnection of each process (conn, by
// pid, read at z; a process not in it, such as the postmaster, is
// background). Like cpuUsage, a process that exited in between is not
// counted.
func postgresCPUByConnection(a, z cpuSnap, conn map[int]string) map[string]float64 {
	by := map[string]float64{}
	for pid, t := range z.byPID {
		if z.role[pid] != "postgres" {
			continue
		}
		c, ok := conn[pid]
		if !ok {
			c = "background"
		}
		by[c] += max(t-a.byPID[pid], 0)
	}
	return by
}

// cpuMs is CPU time per delivery, in core-milliseconds, by party.
type cpuMs struct {
	Postgres   float64 `json:"postgres"`
	API        float64 `json:"api"`
	Dispatcher float64 `json:"dispatcher"`
	Bench      float64 `json:"bench"`
	Total      float64 `json:"total"`
}

// cpuPerDelivery divides the cores used over secs by deliveries.
func cpuPerDelivery(c cpuReport, secs, deliveries float64) cpuMs {
	f := func(cores float64) float64 { return round3(cores * secs * 1000 / deliveries) }
	return cpuMs{
		Postgres: f(c.Postgres), API: f(c.API), Dispatcher: f(c.Dispatcher), Bench: f(c.Bench),
		Total: f(c.Postgres + c.API + c.Dispatcher + c.Bench),
	}
}

// threadSleeps is a process's voluntary context switches, summed over its
// threads (/proc/PID/task/*/status); 0 when it cannot be read.
func threadSleeps(pid int) int64 {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0
	}
	var n int64
	for _, t := range tasks {
		if v, err := procStatusNumber(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()), "voluntary_ctxt_switches"); err == nil {
			n += v
		}
	}
	return n
}

// rssBytes returns a process's resident set size from /proc/PID/status.
func rssBytes(pid int) (int64, error) { return procStatusBytes(pid, "VmRSS") }

// hwmBytes returns a process's peak resident set size (VmHWM).
func hwmBytes(pid int) (int64, error) { return procStatusBytes(pid, "VmHWM") }

// procStatusBytes returns a size field of /proc/PID/status.
func procStatusBytes(pid int, field string) (int64, error) {
	kb, err := procStatusNumber(fmt.Sprintf("/proc/%d/status", pid), field)
	if err != nil {
		return 0, err
	}
	return kb << 10, nil
}

// procStatusNumber returns the number that starts a field of a status
// file of /proc (a process's or a thread's).
func procStatusNumber(path, field string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read process status: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse %s: %w", field, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("no %s in process status", field)
}

// clockTicks is USER_HZ, the unit of /proc CPU times (100 on Linux).
const clockTicks = 100

// cpuSeconds returns a process's user+system CPU time.
func cpuSeconds(pid int) float64 {
	_, utime, stime, ok := procStat(pid)
	if !ok {
		return 0
	}
	return float64(utime+stime) / clockTicks
}

// procStat returns a process's parent id and CPU ticks from /proc/PID/stat.
func procStat(pid int) (ppid int, utime, stime int64, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	// After the command: state(0) ppid(1) ... utime(11) stime(12).
	if len(f) < 13 {
		return 0, 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	utime, _ = strconv.ParseInt(f[11], 10, 64)
	stime, _ = strconv.ParseInt(f[12], 10, 64)
	return ppid, utime, stime, true
}

// machineBusySeconds returns the CPU time all cores spent busy since boot,
// from /proc/stat (everything but idle and iowait).
func machineBusySeconds() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		if i >= 8 { // guest time is already counted in user
			break
		}
		busy += n
	}
	return float64(busy) / clockTicks
}

package bench

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// ticksPerSecond is USER_HZ, the unit of /proc's CPU times on Linux.
const ticksPerSecond = 100

// ProcessCPU is the CPU time (user + system) process pid has used so far,
// read from /proc/<pid>/stat.
func ProcessCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	_, d, err := parseStat(data)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return d, nil
}

// JavaCPU is ProcessCPU of a Java process pid, with the part its JIT
// compiler's threads spent (/proc/<pid>/task: the threads named "C1
// CompilerThread…" and "C2 CompilerThread…"). Compiling is what a JVM pays
// while it warms up to the work it is given, not for each request.
func JavaCPU(pid int) (total, jit time.Duration, err error) {
	total, err = ProcessCPU(pid)
	if err != nil {
		return 0, 0, err
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, t := range tasks {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
		if err != nil {
			continue // the thread ended meanwhile
		}
		name, d, err := parseStat(data)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/task/%s/stat: %w", pid, t.Name(), err)
		}
		if strings.HasPrefix(name, "C1 CompilerThre") || strings.HasPrefix(name, "C2 CompilerThre") {
			jit += d
		}
	}
	return total, jit, nil
}

// parseStat reads the command name and the CPU time (user + system) of a
// /proc stat file, a process's or a thread's.
func parseStat(data []byte) (string, time.Duration, error) {
	// The command name may hold spaces and parentheses: it ends at the last ")".
	open, end := strings.IndexByte(string(data), '('), strings.LastIndexByte(string(data), ')')
	if open < 0 || end < open {
		return "", 0, errors.New("no command name")
	}
	fields := strings.Fields(string(data[end+1:]))
	if len(fields) < 13 {
		return "", 0, fmt.Errorf("%d fields", len(fields))
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return "", 0, err
	}
	return string(data[open+1 : end]), time.Duration(utime+stime) * time.Second / ticksPerSecond, nil
}

// machineBusy is the CPU time the machine has spent busy since it booted
// (/proc/stat: every CPU's time but idle and iowait).
func machineBusy() (time.Duration, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 8 || fields[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy int64
	for i, f := range fields[1:8] { // user nice system idle iowait irq softirq
		if i == 3 || i == 4 {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		busy += n
	}
	return time.Duration(busy) * time.Second / ticksPerSecond, nil
}

// cpuMeter reads the CPU time of named groups of processes, and of the
// machine as a whole, so that a run's CPU can be split by who spent it.
type cpuMeter struct {
	groups map[string][]int // name → pids
	// java are the groups of Java processes, whose JIT compiling is told
	// apart (JavaCPU).
	java map[string]bool
}

// cpuReading is one reading of a cpuMeter.
type cpuReading struct {
	machine time.Duration
	groups  map[string]time.Duration
	jit     map[string]time.Duration // of the java groups
}

func (m cpuMeter) read() (cpuReading, error) {
	r := cpuReading{groups: map[string]time.Duration{}, jit: map[string]time.Duration{}}
	var err error
	if r.machine, err = machineBusy(); err != nil {
		return r, err
	}
	for name, pids := range m.groups {
		for _, pid := range pids {
			var d, jit time.Duration
			if m.java[name] {
				d, jit, err = JavaCPU(pid)
			} else {
				d, err = ProcessCPU(pid)
			}
			if err != nil {
				return r, fmt.Errorf("%s: %w", name, err)
			}
			r.groups[name] += d
			if m.java[name] {
				r.jit[name] += jit
			}
		}
	}
	return r, nil
}

// cpuSplit is what each group (and the machine) spent between two readings, per job.
type cpuSplit struct {
	Machine time.Duration
	Groups  map[string]time.Duration
	// JIT is what the JIT compiler took of a Java group's time.
	JIT map[string]time.Duration
}

func splitCPU(before, after cpuReading, jobs int) cpuSplit {
	s := cpuSplit{Machine: (after.machine - before.machine) / time.Duration(jobs), Groups: map[string]time.Duration{},
		JIT: map[string]time.Duration{}}
	for name, d := range after.groups {
		s.Groups[name] = (d - before.groups[name]) / time.Duration(jobs)
	}
	for name, d := range after.jit {
		s.JIT[name] = (d - before.jit[name]) / time.Duration(jobs)
	}
	return s
}

// String lists the groups, the largest first, and what no group accounts
// for (the kernel's threads, other processes).
func (s cpuSplit) String() string {
	names := make([]string, 0, len(s.Groups))
	var sum time.Duration
	for name, d := range s.Groups {
		names = append(names, name)
		sum += d
	}
	slices.SortFunc(names, func(a, b string) int {
		if c := int(s.Groups[b] - s.Groups[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	var b strings.Builder
	for _, name := range names {
		fmt.Fprintf(&b, " %s %.2f", name, ms(s.Groups[name]))
		if jit, ok := s.JIT[name]; ok {
			fmt.Fprintf(&b, " (%.2f of it compiling)", ms(jit))
		}
		b.WriteString(",")
	}
	fmt.Fprintf(&b, " other %.2f", ms(s.Machine-sum))
	return strings.TrimPrefix(b.String(), " ")
}

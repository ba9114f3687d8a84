package gitea

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A pid file records each running Gitea with the process that started it,
// in one directory for the machine's user. Start reads them all: a Gitea
// whose starter is gone (a test binary killed before Stop ran) is killed
// with its process group and its temporary work directory removed. One
// whose starter lives (another test package running at the same time) is
// left alone.

type pidRecord struct {
	Pid int `json:"pid"`
	// Owner is the starting process, OwnerStart its start time in clock
	// ticks since boot (/proc/<pid>/stat), so a reused pid is not taken
	// for the owner.
	Owner      int    `json:"owner"`
	OwnerStart string `json:"ownerStart"`
	Dir        string `json:"dir"`
	RemoveDir  bool   `json:"removeDir"`
}

func pidDir() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("petri-gitea-pids-%d", os.Getuid()))
}

func writePidFile(pid int, dir string, removeDir bool) (string, error) {
	if err := os.MkdirAll(pidDir(), 0o700); err != nil {
		return "", err
	}
	rec := pidRecord{Pid: pid, Owner: os.Getpid(), OwnerStart: startTime(os.Getpid()), Dir: dir, RemoveDir: removeDir}
	data, err := json.Marshal(rec)
	if err != nil {
		return "", err
	}
	path := filepath.Join(pidDir(), strconv.Itoa(pid)+".json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", fmt.Errorf("write gitea pid file: %w", err)
	}
	return path, nil
}

// cleanStale kills Gitea servers whose starter is gone and removes what
// they left.
func cleanStale() {
	files, _ := filepath.Glob(filepath.Join(pidDir(), "*.json"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var rec pidRecord
		if json.Unmarshal(data, &rec) != nil || rec.Pid <= 0 {
			_ = os.Remove(f)
			continue
		}
		if rec.OwnerStart != "" && startTime(rec.Owner) == rec.OwnerStart {
			continue // its starter still runs
		}
		// Kill only a process that is this Gitea: its command line names
		// its work directory.
		if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", rec.Pid)); err == nil &&
			strings.Contains(string(cmdline), rec.Dir) {
			_ = syscall.Kill(-rec.Pid, syscall.SIGKILL)
		}
		if rec.RemoveDir && strings.HasPrefix(filepath.Base(rec.Dir), "petri-gitea-") {
			_ = os.RemoveAll(rec.Dir)
		}
		_ = os.Remove(f)
	}
}

// startTime is field 22 of /proc/<pid>/stat; empty when the process does
// not exist.
func startTime(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command name (field 2) may hold spaces; fields after it follow
	// the last ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state); field 22 is fields[19].
	if len(fields) < 20 {
		return ""
	}
	return fields[19]
}

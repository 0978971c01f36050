package sqlite

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// posixLocks counts the POSIX locks this process holds on path, from
// /proc/locks (Linux).
func posixLocks(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Skip("no /proc/locks:", err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	ino := fmt.Sprintf(":%d", st.Sys().(*syscall.Stat_t).Ino)
	pid := fmt.Sprint(os.Getpid())
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		// "1: POSIX  ADVISORY  READ 1234 08:01:5678 1073741826 1073741826"
		f := strings.Fields(l)
		if len(f) > 5 && f[1] == "POSIX" && f[4] == pid && strings.HasSuffix(f[5], ino) {
			n++
		}
	}
	return n
}

// TestOpenKeepsTheLocksOfAnOpenSaver: a second Open of a database this
// process has open leaves the first Saver's SQLite locks in place. Its
// read-only pre-check opened and closed the file, and closing any
// descriptor of a file drops every POSIX lock the process holds on it:
// another process could then take the database for unused and delete the
// WAL the first Saver writes to.
func TestOpenKeepsTheLocksOfAnOpenSaver(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	s, err := Open(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	putLine(t, s, "a", 2)
	held := posixLocks(t, path)
	if held == 0 {
		t.Skip("the open Saver holds no POSIX lock on the database here")
	}
	s2, err := Open(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got := posixLocks(t, path); got < held {
		t.Fatalf("after a second Open this process holds %d POSIX locks on the database, before %d", got, held)
	}
}

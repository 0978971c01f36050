package sqlite

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// posixLocks returns the POSIX locks this process holds on path, from
// /proc/locks (Linux), each as its type and byte range. The file is one
// list of every lock of the machine, generated again at every read() of
// it: when another process takes or drops a lock between two reads of one
// pass, a line is repeated or skipped. The locks of one process on one
// file merge by range, so a repeated line is the same lock (a set keeps
// it once); a skipped one is why a caller asks several times (see
// holdsAll).
func posixLocks(t *testing.T, path string) map[string]bool {
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
	out := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		// "1: POSIX  ADVISORY  READ 1234 08:01:5678 1073741826 1073741826"
		f := strings.Fields(l)
		if len(f) > 7 && f[1] == "POSIX" && f[4] == pid && strings.HasSuffix(f[5], ino) {
			out[f[3]+" "+f[6]+"-"+f[7]] = true
		}
	}
	return out
}

// lockReads bounds how many times holdsAll reads /proc/locks: a lock
// really dropped is missing from every read, one skipped by a read is not.
const lockReads = 50

// holdsAll reports whether this process holds every lock of want on path,
// as one of up to lockReads reads of /proc/locks shows, and the locks the
// last read showed.
func holdsAll(t *testing.T, path string, want map[string]bool) (bool, map[string]bool) {
	t.Helper()
	var got map[string]bool
	for range lockReads {
		got = posixLocks(t, path)
		all := true
		for l := range want {
			all = all && got[l]
		}
		if all {
			return true, got
		}
	}
	return false, got
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
	// What the idle Saver holds: the same locks in two reads in a row
	// (nothing of it runs, so only a read of /proc/locks that repeated or
	// skipped a line tells otherwise).
	held := posixLocks(t, path)
	for range lockReads {
		again := posixLocks(t, path)
		if maps.Equal(held, again) {
			break
		}
		held = again
	}
	if len(held) == 0 {
		t.Skip("the open Saver holds no POSIX lock on the database here")
	}
	s2, err := Open(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if ok, got := holdsAll(t, path, held); !ok {
		t.Fatalf("after a second Open this process holds the POSIX locks %v on the database, before %v: some were dropped", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(held)))
	}
}

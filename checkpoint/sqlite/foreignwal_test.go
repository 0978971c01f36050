package sqlite

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// copyFile copies src to dst.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// closedDB writes a lockstep database with threads "a" and "b" and closes
// it: no -wal is left beside it.
func closedDB(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "d.db")
	s, err := Open(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	putLine(t, s, "a", 3)
	putLine(t, s, "b", 2)
	closeChecked(t, s)
	if _, err := os.Stat(path + "-wal"); err == nil {
		t.Fatal("a -wal is left after Close")
	}
	return path
}

// liveWAL opens another lockstep database, writes puts steps of a thread
// to it, and returns a copy of its -wal (and -shm) taken while it is open,
// as an operator copying files would.
func liveWAL(t *testing.T, puts int) (wal, shm []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f.db")
	s := openAt(t, path, Config{})
	putLine(t, s, "other", puts)
	return fileBytes(t, path+"-wal"), fileBytes(t, path+"-shm")
}

// TestOpenRefusesAForeignWAL (R12 d, issue 16 item 9): a -wal copied from
// another lockstep database next to a database file, with or without its
// -shm, or next to the path of a database that is gone, is refused by
// Open and OpenExisting with a *WALError matching ErrForeignWAL, and
// every file is left byte for byte as it was (before, SQLite replayed the
// -wal and the file then held the other database's pages: every thread
// gone). Negative controls: a database with its own -wal (copied
// together while open, as a crash leaves them) opens and reads back.
func TestOpenRefusesAForeignWAL(t *testing.T) {
	foreignWAL, foreignSHM := liveWAL(t, 20)
	if w := walOf(t, foreignWAL); w.frames == 0 || w.page1 == nil {
		t.Fatalf("the other database's -wal holds %d frames, page 1: %v; the test needs both", w.frames, w.page1 != nil)
	}
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, dir string) string // returns the database path
		foreign bool
		noDB    bool // there is no database, only its -wal
	}{
		{"another database's -wal", func(t *testing.T, dir string) string {
			path := closedDB(t, dir)
			writeFile(t, path+"-wal", foreignWAL)
			return path
		}, true, false},
		{"another database's -wal and -shm", func(t *testing.T, dir string) string {
			path := closedDB(t, dir)
			writeFile(t, path+"-wal", foreignWAL)
			writeFile(t, path+"-shm", foreignSHM)
			return path
		}, true, false},
		{"a -wal and no database", func(t *testing.T, dir string) string {
			path := filepath.Join(dir, "gone.db")
			writeFile(t, path+"-wal", foreignWAL)
			return path
		}, true, true},
		{"a -wal and an empty database file", func(t *testing.T, dir string) string {
			path := filepath.Join(dir, "empty.db")
			writeFile(t, path, nil)
			writeFile(t, path+"-wal", foreignWAL)
			return path
		}, true, true},
		{"its own -wal, copied with it while open", func(t *testing.T, dir string) string {
			src := filepath.Join(t.TempDir(), "live.db")
			s := openAt(t, src, Config{})
			putLine(t, s, "a", 3)
			putLine(t, s, "b", 2)
			path := filepath.Join(dir, "d.db")
			copyFile(t, src, path)
			copyFile(t, src+"-wal", path+"-wal")
			return path
		}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := tc.setup(t, dir)
			before := dirFiles(t, dir)
			for _, open := range []struct {
				name string
				fn   func(string, Config) (*Saver, error)
			}{{"OpenExisting", OpenExisting}, {"Open", Open}} {
				s, err := open.fn(path, Config{})
				if !tc.foreign {
					if err != nil {
						t.Fatalf("%s: %v", open.name, err)
					}
					for th, n := range map[string]int{"a": 3, "b": 2} {
						if got := listIDs(t, s, th); len(got) != n {
							t.Errorf("%s: thread %s has %d checkpoints, want %d", open.name, th, len(got), n)
						}
					}
					closeChecked(t, s)
					continue
				}
				if open.name == "OpenExisting" && tc.noDB {
					// It never creates a database: there is none to open.
					if !errors.Is(err, ErrNotLockstep) {
						t.Errorf("OpenExisting: %v, want ErrNotLockstep", err)
					}
					continue
				}
				if err == nil {
					_, gerr := s.Get(t.Context(), checkpoint.Ref{Thread: "a"}, checkpoint.GetOptions{})
					s.Close()
					t.Fatalf("%s succeeded (Get of thread a: %v)", open.name, gerr)
				}
				var we *WALError
				if !errors.Is(err, ErrForeignWAL) || !errors.As(err, &we) || !we.Foreign || we.Path != path {
					t.Fatalf("%s: %v (%T), want a *WALError matching ErrForeignWAL naming %s", open.name, err, err, path)
				}
				t.Logf("%s: %v", open.name, err)
				if diff, ok := sameFiles(before, dirFiles(t, dir)); !ok {
					t.Errorf("%s changed the files: %s", open.name, diff)
				}
			}
		})
	}
}

// walOf parses the bytes of a -wal file.
func walOf(t *testing.T, b []byte) walContent {
	t.Helper()
	path := filepath.Join(t.TempDir(), "x-wal")
	writeFile(t, path, b)
	w, err := readWAL(path)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// dirFiles returns the contents of the files in dir, by name.
func dirFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	m := map[string][]byte{}
	for _, name := range dirNames(t, dir) {
		m[name] = fileBytes(t, filepath.Join(dir, name))
	}
	return m
}

// sameFiles reports whether a and b hold the same files with the same
// bytes, apart from the -shm (SQLite's index of the -wal, which any reader
// rebuilds from it), which may differ or appear; diff names the first
// difference.
func sameFiles(a, b map[string][]byte) (diff string, ok bool) {
	for _, m := range []map[string][]byte{a, b} {
		for name := range m {
			if strings.HasSuffix(name, "-shm") {
				continue
			}
			x, inA := a[name]
			y, inB := b[name]
			switch {
			case !inA:
				return name + " appeared", false
			case !inB:
				return name + " is gone", false
			case !bytes.Equal(x, y):
				return name + " changed", false
			}
		}
	}
	return "", true
}

// TestEveryWALGenerationHoldsPage1 (issue 16 item 9): each time SQLite
// starts the -wal over, the saver writes page 1 (the header with the
// file's identity) again within its next two commits, so that a copy of
// the -wal taken from then on holds what probe compares. SQLite itself
// writes page 1 only when the file grows or its schema changes, which
// took 3 to 9 Puts of this line; the negative control (no identity to
// stamp) shows a generation without it after two Puts.
func TestEveryWALGenerationHoldsPage1(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restart string // the checkpoint that lets the next commit start the -wal over
		stamp   bool
	}{
		{"restart", "RESTART", true},
		{"truncate", "TRUNCATE", true},
		{"restart, no stamping", "RESTART", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "g.db")
			s := openAt(t, path, Config{})
			ctx := t.Context()
			id := s.wal.id
			if id == 0 {
				t.Fatal("a new file has no identity")
			}
			if !tc.stamp {
				s.wal.id = 0
			}
			l := putLine(t, s, "warm", 20)
			missing := 0
			for gen := range 6 {
				var busy, logFrames, done int
				if err := s.DB().QueryRowContext(ctx, "PRAGMA wal_checkpoint("+tc.restart+")").Scan(&busy, &logFrames, &done); err != nil || busy != 0 {
					t.Fatalf("checkpoint: busy %d, %v", busy, err)
				}
				for range 2 {
					req := l.next()
					if err := s.Put(ctx, req); err != nil {
						t.Fatal(err)
					}
					l.committed(req)
				}
				w, err := readWAL(path + "-wal")
				if err != nil {
					t.Fatal(err)
				}
				h, ok := parseDBHeader(w.page1)
				switch {
				case w.page1 == nil:
					missing++
					if tc.stamp {
						t.Errorf("generation %d: two commits after the -wal started over it holds no page 1 (%d frames)", gen, w.frames)
					}
				case !ok || h.appID != id:
					t.Errorf("generation %d: page 1 in the -wal names %08x, want %08x", gen, h.appID, id)
				}
			}
			if !tc.stamp && missing == 0 {
				t.Error("without stamping every generation held page 1 after two commits: the test no longer shows what stamping adds")
			}
		})
	}
}

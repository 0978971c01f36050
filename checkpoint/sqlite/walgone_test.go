package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// walMutations are the ways an operator's command takes the -wal away
// from a running writer: each leaves the path naming no file or another
// one, while SQLite writes the file it has open.
var walMutations = []struct {
	name string
	do   func(wal string) error
}{
	{"deleted", os.Remove},
	{"moved away", func(wal string) error { return os.Rename(wal, wal+".moved") }},
	{"replaced by a copy of itself", func(wal string) error {
		b, err := os.ReadFile(wal)
		if err != nil {
			return err
		}
		if err := os.WriteFile(wal+".tmp", b, 0o600); err != nil {
			return err
		}
		return os.Rename(wal+".tmp", wal)
	}},
	{"deleted and created again, empty", func(wal string) error {
		if err := os.Remove(wal); err != nil {
			return err
		}
		return os.WriteFile(wal, nil, 0o600)
	}},
}

// TestWALDeletedUnderTheWriter (issue 15 item 5): a -wal deleted, moved
// or replaced while the saver writes is noticed at the next commit (moved
// to another name: within walPathEvery commits): that commit and every
// later write (Put, PutWrites, Claim, Vacuum) fail with
// a *WALError matching ErrWALDeleted that says what happened, nothing of
// them is saved, and the commits acknowledged before were copied into
// the database file (Saved): after Close every one of them reads back,
// and nothing else. Before, the saver went on acknowledging commits into
// a file no one else could read (TestWALDeletedThenKilled shows what a
// kill then lost).
func TestWALDeletedUnderTheWriter(t *testing.T) {
	for _, m := range walMutations {
		t.Run(m.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "w.db")
			s, err := Open(path, Config{})
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			l := putLine(t, s, "t", 5)
			putLine(t, s, "u", 2)
			if err := m.do(path + "-wal"); err != nil {
				t.Fatal(err)
			}
			// A file that lost its name is seen at the next commit; a
			// file moved to another name, within walPathEvery commits.
			// What was acknowledged meanwhile went to the file SQLite
			// writes, and is saved with the rest.
			acked := 0
			for {
				req := l.next()
				err := s.Put(ctx, req)
				if err != nil {
					if !errors.Is(err, ErrWALDeleted) {
						t.Fatalf("Put: %v, want ErrWALDeleted", err)
					}
					t.Logf("Put: %v", err)
					break
				}
				l.committed(req)
				if acked++; acked >= walPathEvery || m.name != "moved away" {
					t.Fatalf("%d Puts after the -wal was %s succeeded", acked, m.name)
				}
			}
			lease := checkpoint.Lease{Owner: l.owner, TTL: time.Minute}
			for _, call := range []struct {
				name string
				fn   func() error
			}{
				{"Put again", func() error { return s.Put(ctx, l.next()) }},
				{"PutWrites", func() error {
					return s.PutWrites(ctx, checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: "t", ID: l.head}, Lease: lease,
						Tasks: []checkpoint.TaskWrites{{TaskID: "x", Node: "n", Path: "pull", Writes: []checkpoint.Write{{Channel: "N", Value: []byte("1")}}}}})
				}},
				{"Claim", func() error { return s.Claim(ctx, checkpoint.Ref{Thread: "t"}, lease) }},
				{"Vacuum", func() error { return s.Vacuum(ctx, 0) }},
			} {
				err := call.fn()
				var we *WALError
				if !errors.Is(err, ErrWALDeleted) || !errors.As(err, &we) || we.Foreign || we.Path != path || !we.Saved {
					t.Fatalf("%s: %v (%T), want a *WALError matching ErrWALDeleted naming the file, with the acknowledged commits saved", call.name, err, err)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			os.Remove(path + "-wal.moved")
			s2 := openAt(t, path, Config{})
			if got := listIDs(t, s2, "t"); len(got) != 5+acked {
				t.Errorf("thread t has %d checkpoints after reopening, want the %d acknowledged", len(got), 5+acked)
			}
			if got := listIDs(t, s2, "u"); len(got) != 2 {
				t.Errorf("thread u has %d checkpoints after reopening, want 2", len(got))
			}
			integrityOK(t, s2.DB())
		})
	}
}

// TestWALDeletedThenKilled (issue 15 item 5): a process whose -wal is
// deleted under it, and which is then killed, lost no acknowledged commit.
// The child acknowledges 6 Puts, deletes (or moves) its -wal, tries 10
// more and prints an ACK for each that returned nil, and kills itself.
// Before, all 16 were acknowledged and every one was lost (the deleted
// -wal held them all, and went with the process); now the later Puts fail
// (a moved -wal: after at most walPathEvery-1 more) and every
// acknowledged one is in the database file.
func TestWALDeletedThenKilled(t *testing.T) {
	for _, m := range walMutations[:2] {
		t.Run(m.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "k.db")
			c, sc := startChild(t, "walgone", envDB+"="+path, envCount+"=6", envPrefix+"="+m.name)
			if !c.wait(t, sc) {
				t.Fatalf("the child was not killed\n%s", c.stderr.String())
			}
			os.Remove(path + "-wal.moved")
			if len(c.acks) < 6 || len(c.acks) >= 6+walPathEvery {
				t.Fatalf("the child acknowledged %d Puts, want 6 before the -wal went and fewer than %d after\n%s", len(c.acks), walPathEvery, c.stderr.String())
			}
			t.Logf("%d Puts acknowledged; child: %s", len(c.acks), strings.TrimSpace(c.stderr.String()))
			checkRecovered(t, path, c.acks)
		})
	}
}

// helperWALGone is the child of TestWALDeletedThenKilled: it puts
// envCount checkpoints, takes its -wal away (the walMutations named
// envPrefix), puts envCount more, acknowledging on stdout each Put that
// returned nil, and kills itself.
func helperWALGone() error {
	path := os.Getenv(envDB)
	n, _ := strconv.Atoi(os.Getenv(envCount))
	s, err := Open(path, Config{})
	if err != nil {
		return err
	}
	a := ackSaver{Saver: s, out: os.Stdout}
	l := newLine("t")
	put := func() error {
		req := l.next()
		if err := a.Put(context.Background(), req); err != nil {
			return err
		}
		l.committed(req)
		return nil
	}
	for range n {
		if err := put(); err != nil {
			return err
		}
	}
	for _, m := range walMutations {
		if m.name == os.Getenv(envPrefix) {
			if err := m.do(path + "-wal"); err != nil {
				return err
			}
		}
	}
	var first error
	for range n + 4 {
		if err := put(); err != nil && first == nil {
			first = err
			fmt.Fprintln(os.Stderr, "put after the -wal went:", err)
		}
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

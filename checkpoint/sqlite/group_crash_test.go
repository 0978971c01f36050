package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// groupCrashMembers is how many Puts the group crash child commits in one
// group.
const groupCrashMembers = 8

// helperGroupCrash is the child of TestGroupCommitCrash: it gives
// groupCrashMembers threads a first checkpoint ("BASE thread id"), then
// holds one Put inside its transaction until a Put (with a pending write
// of its own) of each of those threads waits behind it ("PLAN thread id"),
// so that they commit as one group, and kills itself with SIGKILL at the
// envKillAt-th call of the hook point envKillPoint. A Put that returns
// prints "ACK thread id".
func helperGroupCrash() error {
	point := os.Getenv(envKillPoint)
	at, _ := strconv.Atoi(os.Getenv(envKillAt))
	g := newGate("sqlite.put.beforeCommit")
	var kill sync.Mutex // guards seen
	seen, armed := 0, false
	hook := func(p string) {
		g.hook(p)
		kill.Lock()
		defer kill.Unlock()
		if armed && p == point {
			if seen++; seen == at {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		}
	}
	s, err := Open(os.Getenv(envDB), Config{Synchronous: SyncFull, Hook: hook})
	if err != nil {
		return err
	}
	defer s.Close()
	ctx := context.Background()
	var reqs []checkpoint.PutRequest
	for i := 0; i < groupCrashMembers; i++ {
		l := newLine(fmt.Sprintf("member-%d", i))
		req := l.next()
		if err := s.Put(ctx, req); err != nil {
			return err
		}
		l.committed(req)
		fmt.Printf("BASE %s %s\n", l.thread, l.head)
		req = l.next()
		req.Writes = []checkpoint.TaskWrites{{TaskID: "marker", Writes: []checkpoint.Write{{Channel: "v", Value: json.RawMessage(`"` + l.thread + `"`)}}}}
		fmt.Printf("PLAN %s %s\n", l.thread, req.Checkpoint.ID)
		reqs = append(reqs, req)
	}
	first := newLine("first")
	defer g.release() // on an early return, so that Close does not wait for the held Put
	g.armed.Store(true)
	firstDone := make(chan error, 1)
	go func() { firstDone <- s.Put(ctx, first.next()) }()
	<-g.held
	var wg sync.WaitGroup
	errs := make([]error, len(reqs))
	for i, req := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = s.Put(ctx, req); errs[i] == nil {
				fmt.Printf("ACK %s %s\n", req.Thread, req.Checkpoint.ID)
			}
		}()
		for deadline := time.Now().Add(time.Minute); ; {
			s.group.mu.Lock()
			n := len(s.group.queue)
			s.group.mu.Unlock()
			if n == i+1 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d Puts queued after a minute, want %d", n, i+1)
			}
			time.Sleep(time.Millisecond)
		}
	}
	kill.Lock()
	armed = true
	kill.Unlock()
	g.release()
	wg.Wait()
	if err := <-firstDone; err != nil {
		return err
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	fmt.Println("DONE")
	return nil
}

// TestGroupCommitCrash (R02 for group commit): a child process commits
// groupCrashMembers Puts, each with a pending write, as one group and is
// killed with SIGKILL in the middle of it: after some members' statements
// ran, after all of them (before COMMIT), and after COMMIT. After each
// kill the file checks out and every member's checkpoint is whole (the
// head, with its pending write and its task writes) or absent (the head
// is the one before, with no trace of the new one), and all members of
// the group share the same fate: none committed before COMMIT, all after.
func TestGroupCommitCrash(t *testing.T) {
	cases := []struct {
		point   string
		at      int
		present bool
	}{
		{"sqlite.group.member", 3, false},
		{"sqlite.group.member", groupCrashMembers, false},
		{"sqlite.put.beforeCommit", 1, false},
		// #1 is the held Put's own, which commits first.
		{"sqlite.put.afterCommit", 2, true},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s-%d", c.point, c.at), func(t *testing.T) {
			path := t.TempDir() + "/group.db"
			ch, sc := startChild(t, "groupcrash", envDB+"="+path, envKillPoint+"="+c.point, envKillAt+"="+strconv.Itoa(c.at))
			base, plan := map[string]string{}, map[string]string{}
			var acks []string
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) == 3 {
					switch f[0] {
					case "BASE":
						base[f[1]] = f[2]
					case "PLAN":
						plan[f[1]] = f[2]
					case "ACK":
						acks = append(acks, f[1]+" "+f[2])
					}
				}
			}
			if !ch.wait(t, sc) {
				t.Fatalf("the child was not killed at %s #%d\n%s", c.point, c.at, ch.stderr.String())
			}
			if len(plan) != groupCrashMembers {
				t.Fatalf("the child planned %d members, want %d\n%s", len(plan), groupCrashMembers, ch.stderr.String())
			}
			checkRecovered(t, path, acks)
			s := openAt(t, path, Config{})
			defer closeChecked(t, s)
			for thread, id := range plan {
				tp, err := s.Get(t.Context(), checkpoint.Ref{Thread: thread}, checkpoint.GetOptions{})
				if err != nil {
					t.Fatalf("%s: %v", thread, err)
				}
				var ws int
				if err := s.DB().QueryRow(`SELECT count(*) FROM writes WHERE thread_id = ? AND checkpoint_id = ?`, thread, id).Scan(&ws); err != nil {
					t.Fatal(err)
				}
				switch tp.Checkpoint.ID {
				case id:
					whole := len(tp.Pending) == 1 && tp.Pending[0].TaskID == "marker" && ws == 1 && len(tp.Checkpoint.Channels) > 0
					if !whole || !c.present {
						t.Errorf("%s: checkpoint %s present (whole: %v, %d pending writes), want it %s", thread, id, whole, len(tp.Pending), map[bool]string{true: "whole", false: "absent"}[c.present])
					}
				case base[thread]:
					if ws != 0 || c.present {
						t.Errorf("%s: checkpoint %s absent with %d of its pending writes left, want it %s", thread, id, ws, map[bool]string{true: "whole", false: "absent, with none"}[c.present])
					}
				default:
					t.Errorf("%s: head %s, want %s or %s", thread, tp.Checkpoint.ID, base[thread], id)
				}
			}
		})
	}
}

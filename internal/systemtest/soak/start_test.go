package soak_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/systemtest"
)

// TestSoakLateStart: a soak process held (SIGSTOP) between registering a
// thread and starting it, for longer than soakTakeOverAge, starts it
// after another process's scanner started it and drove it to its end, or
// to its approval. The late start must apply nothing: started without a
// run key, it was new input on the thread (a second customer message),
// which the agent answered from a fourth model turn its script does not
// have, and the thread failed (the soak's CI failure). The engine was
// right: Invoke is new input on an existing thread, and graph.RunKey is
// what makes a start idempotent.
func TestSoakLateStart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		decide bool // the approval is decided and the thread resumed before the late start
		want   graph.Status
	}{
		{"the thread is done", true, graph.StatusDone},
		{"the thread waits for its approval", false, graph.StatusWaiting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			cfg := systemtest.SoakAppConfig{DB: filepath.Join(dir, "soak.db"), Provider: filepath.Join(dir, "provider.db")}
			late, err := systemtest.OpenSoakApp(ctx, cfg) // the held process
			if err != nil {
				t.Fatal(err)
			}
			defer late.Close()
			scanner, err := systemtest.OpenSoakApp(ctx, cfg) // the other process
			if err != nil {
				t.Fatal(err)
			}
			defer scanner.Close()
			const th = "soak-1-p1.0-g2-74"
			if _, err := soakStart(ctx, scanner, th); err != nil {
				t.Fatal(err)
			}
			if tc.decide {
				page, err := scanner.Inbox.List(ctx, approval.Filter{Thread: th})
				if err != nil || len(page.Items) != 1 {
					t.Fatalf("pending approvals %+v, %v; want 1", page.Items, err)
				}
				if _, err := scanner.Inbox.Approve(ctx, page.Items[0].ID, "reviewer", "soak"); err != nil {
					t.Fatal(err)
				}
				if _, err := scanner.Worker.RunOnce(ctx); err != nil {
					t.Fatal(err)
				}
			}
			before, err := scanner.Runner.GetState(ctx, th)
			if err != nil || before.Status != tc.want {
				t.Fatalf("before the late start: %v, %v; want %s", before.Status, err, tc.want)
			}
			res, err := soakStart(ctx, late, th)
			if err != nil || !res.Repeated {
				t.Fatalf("late start: repeated %t, %v; want a repeated start", res.Repeated, err)
			}
			after, err := late.Runner.GetState(ctx, th)
			if err != nil {
				t.Fatal(err)
			}
			if msg := soakCheckSnapshot(after); msg != "" {
				t.Errorf("after the late start: %s\nhistory:\n%s", msg, soakHistory(ctx, late.Runner, th))
			}
			if d := cmp.Diff(before.Config, after.Config); d != "" || after.Status != tc.want {
				t.Errorf("the late start moved the thread: %s -> %s (-before +after):\n%s", before.Status, after.Status, d)
			}
		})
	}
}

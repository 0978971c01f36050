package demo_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/examples/escalation/escalate"
	"github.com/lockstepgo/lockstep/examples/hotelbooking/booking"
	"github.com/lockstepgo/lockstep/examples/internal/demo"
	"github.com/lockstepgo/lockstep/examples/refund/refunds"
	"github.com/lockstepgo/lockstep/examples/support/helpdesk"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/scripted"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestBranch: the prefix first, then the branch of the last tool
// result's status (a replayed result takes the executed branch); an
// uncovered status fails loudly.
func TestBranch(t *testing.T) {
	m := demo.Branch([]scripted.Turn{scripted.Say("first")}, map[nodes.Status][]scripted.Turn{
		nodes.StatusExecuted: {scripted.Say("done")},
		nodes.StatusRejected: {scripted.Say("not done")},
	})
	ctx := context.Background()
	ask := func(msgs ...nodes.Message) (string, error) {
		out, err := m.Generate(ctx, msgs, nil)
		return out.Content, err
	}
	user := nodes.Message{Role: nodes.RoleUser, Content: "go"}
	asst := nodes.Message{Role: nodes.RoleAssistant, Content: "first", ToolCalls: []nodes.ToolCall{{ID: "c", Name: "x", Arguments: "{}"}}}
	tool := func(st nodes.Status) nodes.Message {
		return nodes.Message{Role: nodes.RoleTool, ToolCallID: "c", Content: `{"status":"` + string(st) + `"}`}
	}
	var got []string
	for _, msgs := range [][]nodes.Message{
		{user},
		{user, asst, tool(nodes.StatusExecuted)},
		{user, asst, tool(nodes.StatusRejected)},
		// The ledger answered a call that had run in a run that stopped
		// before saving its step: it happened, so the executed branch.
		{user, asst, tool(nodes.StatusReplayed)},
	} {
		s, err := ask(msgs...)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if d := cmp.Diff([]string{"first", "done", "not done", "done"}, got); d != "" {
		t.Errorf("answers (-want +got):\n%s", d)
	}
	if _, err := ask(user, asst, tool(nodes.StatusExpired)); !errors.Is(err, demo.ErrNoScript) {
		t.Errorf("uncovered status: %v, want ErrNoScript", err)
	}
	if _, err := (demo.Scripts{}).Generate(ctx, []nodes.Message{user}, nil); !errors.Is(err, demo.ErrNoScript) {
		t.Errorf("Scripts outside a run: %v, want ErrNoScript", err)
	}
}

// TestExamplesShareOneFile runs the four examples on one database file,
// as their defaults do (./lockstep.db). Each example's sweeper and worker
// keep to its own threads: the refund example sweeps (its own request,
// dated hours back, has expired) and runs its worker while the hotel
// example's approval is pending, then decided but not resumed; the hotel
// approval stays the hotel's, and the hotel example resumes it with its
// own graph.
func TestExamplesShareOneFile(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "lockstep.db")
	var out bytes.Buffer
	// The hotel's request was made 22h ago: it expires in 2h (real time).
	ago := func() time.Time { return time.Now().Add(-22 * time.Hour) }
	hc, err := booking.Run(ctx, booking.Config{DB: db, Out: &out, Now: ago})
	if err != nil {
		t.Fatalf("hotelbooking: %v\n%s", err, out.String())
	}
	if hc.Bookings != 1 {
		t.Fatalf("hotelbooking: %d bookings, want 1", hc.Bookings)
	}
	s, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	store, err := approval.OpenSQLStore(ctx, s.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	inbox := approval.NewInbox(s, store)
	page, err := inbox.List(ctx, approval.Filter{Thread: booking.ThreadApproval})
	if err != nil || len(page.Items) != 1 {
		t.Fatalf("hotel approval: %+v, %v", page.Items, err)
	}
	hotelID := page.Items[0].ID

	// The refund example's sweep leaves the hotel approval pending.
	rc, err := refunds.Run(ctx, refunds.Config{DB: db, Out: &out})
	if err != nil {
		t.Fatalf("refund: %v\n%s", err, out.String())
	}
	if rc.Expired != 1 {
		t.Errorf("refund: the sweeper expired %d requests, want 1 (its own)", rc.Expired)
	}
	if _, err := inbox.Get(ctx, hotelID); err != nil {
		t.Fatalf("after the refund example, the hotel approval is not pending: %v", err)
	}

	// Decided, not resumed: the other examples' workers leave it alone.
	if _, err := inbox.Approve(ctx, hotelID, "you", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := refunds.Run(ctx, refunds.Config{DB: db, Out: &out}); err != nil {
		t.Fatal(err)
	}
	if _, err := helpdesk.Run(ctx, helpdesk.Config{DB: db, Out: &out}); err != nil {
		t.Fatal(err)
	}
	if _, err := escalate.Run(ctx, escalate.Config{DB: db, Out: &out}); err != nil {
		t.Fatal(err)
	}
	rec, err := store.Get(ctx, hotelID)
	if err != nil || !rec.Resume.At.IsZero() || rec.Resume.Attempts != 0 {
		t.Fatalf("another example's worker touched the hotel approval: %+v, %v", rec.Resume, err)
	}
	in, err := demo.Inspect(ctx, s, booking.ThreadApproval)
	if err != nil || in.Status != string(graph.StatusWaiting) {
		t.Fatalf("hotel thread: %v, %v; want waiting", in, err)
	}

	hc, err = booking.Run(ctx, booking.Config{DB: db, Out: &out, Resume: true})
	if err != nil {
		t.Fatalf("hotelbooking --resume: %v\n%s", err, out.String())
	}
	if d := cmp.Diff(booking.Counts{Bookings: 2, Booked: 1, Resumed: 1}, hc); d != "" {
		t.Errorf("hotelbooking --resume (-want +got):\n%s", d)
	}
	threads, err := s.Threads(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]string{}
	for _, ti := range threads {
		in, err := demo.Inspect(ctx, s, ti.Thread)
		if err != nil {
			t.Fatal(err)
		}
		status[ti.Thread] = in.Status
	}
	want := map[string]string{
		booking.ThreadCompliance: "done", booking.ThreadApproval: "done",
		helpdesk.Thread:    "done",
		refunds.ThreadPaid: "done", refunds.ThreadExpired: "done",
		escalate.ThreadSlow: "done", escalate.ThreadOutage: "done",
	}
	if d := cmp.Diff(want, status); d != "" {
		t.Errorf("threads (-want +got):\n%s", d)
	}
}

// TestCommandLine: a bad flag or argument is reported once, on one line,
// with exit code 2 and nothing run; -h prints the usage and exits 0.
func TestCommandLine(t *testing.T) {
	ran := false
	c := demo.Command{Name: "ex", DefaultDB: "x.db", Run: func(ctx context.Context, db string, out io.Writer) error {
		ran = true
		return nil
	}}
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"--bogus"}, 2, "ex: flag provided but not defined: -bogus (see -h)\n"},
		{[]string{"extra"}, 2, "ex: unexpected argument \"extra\" (see -h)\n"},
		{[]string{"-db"}, 2, "ex: flag needs an argument: -db (see -h)\n"},
	} {
		var stdout, stderr bytes.Buffer
		code := c.Main(context.Background(), tc.args, &stdout, &stderr)
		if code != tc.code || stderr.String() != tc.stderr || stdout.Len() != 0 || ran {
			t.Errorf("%q: exit %d, stderr %q, stdout %q, ran %v; want exit %d, stderr %q", tc.args, code, stderr.String(), stdout.String(), ran, tc.code, tc.stderr)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := c.Main(context.Background(), []string{"-h"}, &stdout, &stderr); code != 0 || !strings.HasPrefix(stderr.String(), "Usage of ex:\n") || ran {
		t.Errorf("-h: exit %d, stderr %q, ran %v", code, stderr.String(), ran)
	}
}

// TestCommandInterrupted: a run whose context is cancelled (Ctrl-C under
// Exec) exits 130 and says to run it again, not 1 as a failure.
func TestCommandInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cmd := demo.Command{Name: "ex", DefaultDB: "x.db", Run: func(ctx context.Context, db string, out io.Writer) error {
		cancel()
		return ctx.Err()
	}}
	failing := demo.Command{Name: "ex", DefaultDB: "x.db", Run: func(ctx context.Context, db string, out io.Writer) error {
		return errors.New("boom")
	}}
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		cmd     demo.Command
		code    int
		wantErr string
	}{
		{"cancelled", ctx, cmd, 130, "ex: interrupted (context canceled); run it again to continue where it stopped\n"},
		{"failed", context.Background(), failing, 1, "ex: boom\n"},
	} {
		var errb bytes.Buffer
		if code := tc.cmd.Main(tc.ctx, nil, io.Discard, &errb); code != tc.code || errb.String() != tc.wantErr {
			t.Errorf("%s: exit %d, stderr %q; want %d, %q", tc.name, code, errb.String(), tc.code, tc.wantErr)
		}
	}
}

// TestWorkerOptions: without a lease, the worker's defaults; with one, its
// claims last that lease and a failed resume is tried again after half of
// it, every time.
func TestWorkerOptions(t *testing.T) {
	owns := demo.Prefix("x-")
	if o := demo.WorkerOptions(0, owns); o.Lease != 0 || o.Retry != nil || o.Threads == nil {
		t.Errorf("WorkerOptions(0) = %+v, want the defaults and the threads", o)
	}
	o := demo.WorkerOptions(600*time.Millisecond, owns)
	if o.Lease != 600*time.Millisecond || o.Retry == nil {
		t.Fatalf("WorkerOptions(600ms) = %+v", o)
	}
	for n := 1; n <= 5; n++ {
		if w := o.Retry.Wait(n); w != 300*time.Millisecond {
			t.Errorf("wait after %d failed resumes: %v, want 300ms", n, w)
		}
	}
}

package nodes_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
	"github.com/lockstepgo/lockstep/retry"
)

// fakeClock is a nodes.Clock whose Sleep records the wait, advances the
// time and returns at once (or with ctx's error when ctx is done).
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
	// block makes Sleep wait for ctx instead of returning.
	block bool
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	block := c.block
	c.mu.Unlock()
	if block {
		<-ctx.Done()
		return ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(d)
	return nil
}

func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// logBuffer captures JSON log lines at Debug level.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) Logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Events returns the decoded log lines.
func (b *logBuffer) Events() []map[string]any {
	var out []map[string]any
	for _, line := range bytes.Split([]byte(b.String()), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if json.Unmarshal(line, &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// Statuses returns "tool:status" of every decision event, in order.
func (b *logBuffer) Statuses() []string {
	var out []string
	for _, e := range b.Events() {
		if e["msg"] == "tool decision" {
			out = append(out, e["tool"].(string)+":"+e["status"].(string))
		}
	}
	return out
}

func mustTool(t testing.TB) func(*nodes.Tool, error) *nodes.Tool {
	return func(tool *nodes.Tool, err error) *nodes.Tool {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return tool
	}
}

func newMemLedger(t testing.TB, now func() time.Time) *ledger.Memory {
	t.Helper()
	l, err := ledger.NewMemory(ledger.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// counter counts calls, by key.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) inc(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[k]++
	return c.n[k]
}

func (c *counter) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

// Support-desk tools of the seeds' scenario.

type SearchArgs struct {
	Query string `json:"query" description:"words to look for in ticket titles"`
	Limit int    `json:"limit,omitempty" jsonschema:"minimum=1,maximum=50"`
}

type Ticket struct {
	ID    string `json:"id"`
	Title string `json:"title"`
}

type CloseArgs struct {
	TicketID string `json:"ticket_id" jsonschema:"pattern=^TKT-[0-9]+$"`
}

type Closed struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// desk is a fake support desk with witness counters.
type desk struct{ calls counter }

func (d *desk) searchTool(t testing.TB, opts ...nodes.ToolOption) *nodes.Tool {
	return mustTool(t)(nodes.NewTool("search_tickets",
		"Search support tickets by words in their titles. Call it to find a ticket's ID. Returns the matching tickets.",
		func(ctx context.Context, a SearchArgs, env nodes.Env) ([]Ticket, error) {
			d.calls.inc("search_tickets")
			return []Ticket{{ID: "TKT-3", Title: "Cannot " + a.Query}}, nil
		}, append([]nodes.ToolOption{nodes.Idempotent()}, opts...)...))
}

func (d *desk) closeTool(t testing.TB, opts ...nodes.ToolOption) *nodes.Tool {
	return mustTool(t)(nodes.NewTool("close_ticket",
		"Close a support ticket by ID. Call it once the user's problem is solved. Returns the ticket's new status.",
		func(ctx context.Context, a CloseArgs, env nodes.Env) (Closed, error) {
			d.calls.inc("close_ticket")
			d.calls.inc("close_ticket:" + a.TicketID)
			return Closed{ID: a.TicketID, Status: "closed"}, nil
		}, append([]nodes.ToolOption{nodes.Destructive(approval.RiskHigh), nodes.Idempotent()}, opts...)...))
}

// approve is alice's approval of req, waiting at interrupt id, as an
// approval store records it.
func approve(id string, req approval.Request) approval.Decision {
	return recorded(id, req, approval.Decision{Outcome: approval.Approved, Reviewer: "alice", ArgsHash: req.ArgsHash})
}

// recorded completes d as an approval store records it: the approval ID
// (the interrupt ID of req) and a decision time, the moment req was made
// (so never late). The tool node refuses a decision without them.
func recorded(id string, req approval.Request, d approval.Decision) approval.Decision {
	d.ID, d.DecidedAt = id, req.CreatedAt
	return d
}

func argsHash(t testing.TB, tool, args string) string {
	t.Helper()
	h, err := approval.ArgsHash(tool, json.RawMessage(args))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// upTo is DefaultRetry with n attempts: the schedule a tool gets unless
// a test says otherwise.
func upTo(n int) retry.Policy {
	p := nodes.DefaultRetry()
	p.MaxAttempts = n
	return p
}

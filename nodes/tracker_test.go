package nodes_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/nodes"
)

// tracker is a fake issue tracker that honours idempotency keys, like
// Stripe: a request whose key it has seen returns the existing issue. The
// first request answers after slow (the issue is created at once: a late
// success); later ones answer at once.
type tracker struct {
	mu     sync.Mutex
	slow   time.Duration
	served int
	byKey  map[string]Issue
	all    []Issue
	keys   []string
}

type Issue struct {
	Number  int    `json:"number"`
	URL     string `json:"url"`
	Title   string `json:"title"`
	Created bool   `json:"created"` // false: it already existed
	Key     string `json:"idempotency_key,omitempty"`
}

func newTracker(slow time.Duration) *tracker {
	return &tracker{slow: slow, byKey: map[string]Issue{}}
}

// create is the tracker's API: it ignores the caller's context, as a remote
// server would.
func (tr *tracker) create(title, key string) Issue {
	tr.mu.Lock()
	tr.served++
	first := tr.served == 1
	tr.keys = append(tr.keys, key)
	if is, ok := tr.byKey[key]; ok && key != "" {
		tr.mu.Unlock()
		is.Created = false
		return is
	}
	is := Issue{Number: len(tr.all) + 1, Title: title, Created: true, Key: key}
	is.URL = fmt.Sprintf("https://tracker.example/issues/%d", is.Number)
	tr.all = append(tr.all, is)
	if key != "" {
		tr.byKey[key] = is
	}
	tr.mu.Unlock()
	if first {
		time.Sleep(tr.slow)
	}
	return is
}

func (tr *tracker) issues() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.all)
}

func (tr *tracker) keysSeen() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.keys...)
}

// tool is create_issue: a write (not idempotent by itself) that sends the
// idempotency key downstream, which the tracker enforces (DedupesByKey).
func (tr *tracker) tool(t testing.TB, opts ...nodes.ToolOption) *nodes.Tool {
	opts = append([]nodes.ToolOption{nodes.DedupesByKey()}, opts...)
	return mustTool(t)(nodes.NewTool("create_issue",
		"Create an issue in the tracker. Call it to escalate a problem. Returns the issue's number and URL.",
		func(ctx context.Context, a IssueArgs, env nodes.Env) (Issue, error) {
			type answer struct{ is Issue }
			ch := make(chan answer, 1)
			go func() { ch <- answer{tr.create(a.Title, env.IdempotencyKey())} }()
			select {
			case r := <-ch:
				return r.is, nil
			case <-ctx.Done():
				return Issue{}, ctx.Err()
			}
		}, opts...))
}

// requests returns how many requests the tracker served.
func (tr *tracker) requests() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.served
}

// first returns the first issue created.
func (tr *tracker) first() Issue {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.all[0]
}

// stubbornTool is create_issue with a body that ignores its context: it
// waits for the tracker's answer however long it takes, so that the
// executor abandons it at the timeout and its success comes late. An
// attempt after the first waits retryDelay more before answering.
func (tr *tracker) stubbornTool(t testing.TB, retryDelay time.Duration, opts ...nodes.ToolOption) *nodes.Tool {
	opts = append([]nodes.ToolOption{nodes.DedupesByKey()}, opts...)
	return mustTool(t)(nodes.NewTool("create_issue",
		"Create an issue in the tracker. Call it to escalate a problem. Returns the issue's number and URL.",
		func(ctx context.Context, a IssueArgs, env nodes.Env) (Issue, error) {
			is := tr.create(a.Title, env.IdempotencyKey())
			if env.Attempt > 1 {
				time.Sleep(retryDelay)
			}
			return is, nil
		}, opts...))
}

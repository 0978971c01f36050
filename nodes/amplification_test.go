package nodes_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/nodes"
)

// TestWriteAmplification: the issue tracker answers after 6 s; the tool's
// timeout is 5 s (fake time: testing/synctest). The first attempt times out
// after the tracker created the issue. With the ledger, the retry carries
// the same idempotency key and the tracker dedupes it: one issue, whose URL
// the agent reports. With the ledger switched off there is no key; the
// agent retries the call and a second issue appears: the test can fail.
func TestWriteAmplification(t *testing.T) {
	for _, tc := range []struct {
		ledger bool
		issues int
	}{{true, 1}, {false, 2}} {
		t.Run(fmt.Sprintf("ledger=%v", tc.ledger), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr := newTracker(6 * time.Second)
				opts := []nodes.ExecutorOption{}
				if tc.ledger {
					opts = append(opts, nodes.WithLedger(newMemLedger(t, nil)))
				}
				ex, err := nodes.NewExecutor([]*nodes.Tool{tr.tool(t, nodes.Timeout(5*time.Second))}, opts...)
				if err != nil {
					t.Fatal(err)
				}
				tn, _ := nodes.ToolNode(ex)
				// The agent: create the issue; if the call failed, try again
				// (up to three times); then report the URL.
				model := scriptedModel(func(n int, msgs []nodes.Message) nodes.Message {
					create := nodes.Message{Content: "Escalating.", ToolCalls: []nodes.ToolCall{call(fmt.Sprintf("c%d", n), "create_issue", `{"title":"login broken"}`)}}
					if n == 0 {
						return create
					}
					last := msgs[len(msgs)-1]
					o := observation(t, last)
					if o.Status == nodes.StatusFailed && n < 3 {
						return create
					}
					var is Issue
					_ = jsonUnmarshal(o.Result, &is)
					return nodes.Message{Content: "Created " + is.URL}
				})
				r := agentGraph(t, model, tn, checkpoint.NewMemorySaver(nil))
				res, err := r.Invoke(context.Background(), "th", userSays("the login is broken, escalate"))
				if err != nil {
					t.Fatal(err)
				}
				if res.Status != graph.StatusDone {
					t.Fatalf("status %s", res.Status)
				}
				if got := tr.issues(); got != tc.issues {
					t.Errorf("issues = %d, want %d", got, tc.issues)
				}
				final := res.Values.Messages[len(res.Values.Messages)-1].Content
				want := fmt.Sprintf("Created https://tracker.example/issues/%d", tc.issues)
				if !strings.HasPrefix(final, want) {
					t.Errorf("the agent said %q, want %q", final, want)
				}
				time.Sleep(time.Minute) // the tracker's slow answer ends
			})
		})
	}
}

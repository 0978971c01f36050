package approval

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/lockstepgo/lockstep/internal/hookcall"
	"github.com/lockstepgo/lockstep/internal/safe"
	"github.com/lockstepgo/lockstep/observe"
)

// WithObserver returns a copy of the inbox that reports every decision it
// records (Decide, Approve, Reject, Edit, and the expiries List, Get and
// Sweep record) to h as an observe.KindApprovalDecide operation linked to
// the request's TraceParent. A panic in h loses the event; a call still
// running when the caller's context ends is given up on, and h is not
// called again by this inbox. A nil h removes the observer.
func (in *Inbox) WithObserver(h observe.Hook) *Inbox {
	c := *in
	c.obs = hookcall.New(h, nil, nil)
	return &c
}

// decide records v on it through the store, observed.
func (in *Inbox) decide(ctx context.Context, it Item, v Verdict) (Decision, error) {
	if in.obs == nil {
		return in.store.Decide(ctx, it, v)
	}
	e := requestEvent(observe.KindApprovalDecide, it.ID, it.Thread, it.Request)
	sp := in.obs.Start(ctx, e)
	d, err := in.store.Decide(sp.Ctx, it, v)
	if err != nil {
		e.Outcome = observe.OutcomeFailed
		errFields(&e, err)
	} else {
		e.Outcome, e.Waited = string(d.Outcome), waited(it.Request, d)
	}
	in.obs.End(sp, e)
	return d, err
}

// requestEvent is an event of kind k about approval id of thread.
func requestEvent(k observe.Kind, id, thread string, r Request) observe.Event {
	e := observe.Event{Kind: k, Approval: id, Thread: thread, Tool: r.Tool, Risk: string(r.Risk), Rule: r.Rule}
	if r.TraceParent != "" {
		e.Links = []string{r.TraceParent}
	}
	return e
}

// waited is how long r waited for d, on the store's clock.
func waited(r Request, d Decision) time.Duration {
	if r.CreatedAt.IsZero() || d.DecidedAt.IsZero() || d.DecidedAt.Before(r.CreatedAt) {
		return 0
	}
	return d.DecidedAt.Sub(r.CreatedAt)
}

// errFields sets e's error from err (an error of lockstep's stores or of
// a contained ResumeFunc).
func errFields(e *observe.Event, err error) {
	if err == nil {
		return
	}
	e.Error, e.ErrorType = err.Error(), safe.TypeName(err)
}

// PendingGroup counts the pending approval requests of one tool and risk
// tier (Inbox.CountPending).
type PendingGroup struct {
	Tool  string
	Risk  Risk
	Count int
}

// DefaultCountLimit is how many pending interrupts CountPending reads at
// most when its limit is 0.
const DefaultCountLimit = 10000

// CountPending counts the approval requests that wait in a paused thread
// of the inbox, have no decision and have not expired, by tool and risk
// tier (sorted by tool, then tier), reading at most limit of the saver's
// pending interrupts (0 means DefaultCountLimit; a negative limit is an
// *Error matching ErrInvalidFilter). complete is false when the limit cut
// the count short: the counts are then lower bounds. Unlike List, it
// writes nothing (an expired request is left to List and Sweep to record)
// and it reads in pages of at most MaxPageSize: a metrics collector can
// call it on every collection at a bounded cost. It returns the saver's or
// the store's errors.
func (in *Inbox) CountPending(ctx context.Context, limit int) (groups []PendingGroup, complete bool, err error) {
	switch {
	case limit < 0:
		return nil, false, newError("", ErrInvalidFilter, "count limit %d is negative", limit)
	case limit == 0:
		limit = DefaultCountLimit
	}
	now := in.now()
	counts := map[PendingGroup]int{}
	after, read := "", 0
	for {
		n := min(MaxPageSize, limit-read)
		items, next, err := in.page(ctx, after, n)
		if err != nil {
			return nil, false, err
		}
		read += n
		for _, it := range items {
			r := it.Request
			if !in.owns(it.Thread) || r.validate(it.ID) != nil || r.Expired(now) {
				continue
			}
			counts[PendingGroup{Tool: r.Tool, Risk: r.Risk}]++
		}
		if next == "" || read >= limit {
			complete = next == ""
			break
		}
		after = next
	}
	for g, n := range counts {
		g.Count = n
		groups = append(groups, g)
	}
	slices.SortFunc(groups, func(a, b PendingGroup) int {
		if c := strings.Compare(a.Tool, b.Tool); c != 0 {
			return c
		}
		return strings.Compare(string(a.Risk), string(b.Risk))
	})
	return groups, complete, nil
}

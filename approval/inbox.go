package approval

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/internal/hookcall"
	"github.com/lockstepgo/lockstep/internal/safe"
)

// Page sizes of Inbox.List.
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
)

// MaxFilterBytes caps the text fields of a Filter (Tool, Owner, Thread):
// no request has a longer tool, owner or thread, so a longer one is a
// malformed filter, not one that matches nothing.
const MaxFilterBytes = 1024

// Inbox is the reviewers' view of approvals across all threads: it lists
// the pending ones, records decisions on them and expires the ones nobody
// decided. Requests are read from the saver's pending interrupts (a
// request is the value of the interrupt that paused its thread), decisions
// from the Store. Like the Store, an Inbox is operator-side: never hand it
// to a model or a tool. It is safe for concurrent use.
type Inbox struct {
	lister  checkpoint.InterruptLister
	store   Store
	threads func(thread string) bool
	obs     *hookcall.Caller // WithObserver's; nil without one
}

// now reads the store's clock, the one that decides: an inbox has no clock
// of its own, so what it lists as pending is what its store would let a
// reviewer decide.
func (in *Inbox) now() time.Time { return in.store.Now() }

func (in *Inbox) owns(thread string) (ok bool) {
	if in.threads == nil {
		return true
	}
	if p := safe.Call(func() { ok = in.threads(thread) }); p != nil {
		return false
	}
	return ok
}

// ForThreads returns a copy of the inbox that sees only the approvals of
// threads for which keep returns true. Applications that share a database
// give each inbox (and so each sweeper) the threads it owns, so that one
// application's clock never expires another's requests. keep is the
// application's code, called on the caller's goroutine: a keep that
// panics owns the thread it was asked about not (the inbox neither lists,
// decides nor sweeps its approvals), and the panic goes no further.
func (in *Inbox) ForThreads(keep func(thread string) bool) *Inbox {
	c := *in
	c.threads = keep
	return &c
}

// NewInbox returns an inbox over the pending interrupts of lister (the
// checkpoint saver) and the decisions of store. It reads time from the
// store (Store.Now), so that listing, expiry and deciding share one clock.
func NewInbox(lister checkpoint.InterruptLister, store Store) *Inbox {
	return &Inbox{lister: lister, store: store}
}

// Filter selects and pages pending approvals. The zero Filter lists the
// first DefaultPageSize pending approvals, oldest first.
type Filter struct {
	Tool   string // only calls of this tool
	Owner  string // only requests owned by this team or person
	Thread string // only this thread
	// Risk keeps only requests of this risk tier ("": any tier); a tier
	// that is not one of the Risk constants is an invalid filter.
	Risk Risk
	// MinAge keeps requests created at least this long ago.
	MinAge time.Duration
	// ExpiringWithin keeps requests that expire within this duration from
	// now (0: no bound).
	ExpiringWithin time.Duration
	// Limit caps the page (0 means DefaultPageSize; at most MaxPageSize).
	Limit int
	// Cursor continues after the page that returned it; "" starts at the
	// oldest. A cursor is only meaningful with the filter that made it.
	Cursor string
}

// Page is one page of pending approvals.
type Page struct {
	Items []Item
	// Next is the cursor of the next page, "" after the last page. A page
	// may be short, or even empty, while Next is set.
	Next string
	// Expired counts the expired requests this call read and recorded as
	// Expired (see List).
	Expired int
}

const cursorPrefix = "c1."

func encodeCursor(saver string) string {
	if saver == "" {
		return ""
	}
	return cursorPrefix + base64.RawURLEncoding.EncodeToString([]byte(saver))
}

func decodeCursor(c string) (string, error) {
	if c == "" {
		return "", nil
	}
	rest, ok := strings.CutPrefix(c, cursorPrefix)
	b, err := base64.RawURLEncoding.DecodeString(rest)
	// The decoder skips newlines and ignores stray low bits; refuse any
	// spelling encodeCursor does not write, so a page has one cursor.
	if !ok || err != nil || len(b) == 0 || encodeCursor(string(b)) != c {
		return "", newError("", ErrInvalidFilter, "malformed cursor")
	}
	return string(b), nil
}

// List returns a page of pending approvals: approval requests that wait in
// a paused thread, have no decision and have not expired, oldest first,
// filtered by f. Seeing a request expired is recording it: every
// undecided request of the inbox's threads that List reads and finds
// expired (filtered out or not) is decided Expired by ExpiryReviewer, as
// Sweep would, before List returns, so that no later verdict can approve
// it even if the clock steps back (Page.Expired counts them). It returns
// an *Error matching ErrInvalidFilter for a negative duration, a limit
// out of range, a text field over MaxFilterBytes or a malformed cursor,
// and the saver's or the store's errors (a failure to record an expiry
// among them).
//
// A call reads the pending interrupts of all threads in pages and costs
// O(pending interrupts) in the worst case (a filter that matches little).
func (in *Inbox) List(ctx context.Context, f Filter) (Page, error) {
	limit := f.Limit
	if limit == 0 {
		limit = DefaultPageSize
	}
	switch {
	case limit < 0 || limit > MaxPageSize:
		return Page{}, newError("", ErrInvalidFilter, "limit %d (want 1 to %d)", f.Limit, MaxPageSize)
	case f.MinAge < 0 || f.ExpiringWithin < 0:
		return Page{}, newError("", ErrInvalidFilter, "negative duration")
	case len(f.Tool) > MaxFilterBytes || len(f.Owner) > MaxFilterBytes || len(f.Thread) > MaxFilterBytes:
		return Page{}, newError("", ErrInvalidFilter, "tool, owner or thread of more than %d bytes", MaxFilterBytes)
	case f.Risk != "" && !f.Risk.Valid():
		return Page{}, newError("", ErrInvalidFilter, "unknown risk tier %s", quoteShort(string(f.Risk)))
	}
	after, err := decodeCursor(f.Cursor)
	if err != nil {
		return Page{}, err
	}
	now := in.now()
	var (
		out     []Item
		expired int
	)
	for {
		// Ask for no more than the page still needs, so that a saver page
		// is always consumed whole and its cursor is ours.
		items, next, err := in.page(ctx, after, limit-len(out))
		if err != nil {
			return Page{}, err
		}
		for _, it := range items {
			if !in.owns(it.Thread) {
				continue
			}
			if r := it.Request; r.validate(it.ID) == nil && r.Expired(now) {
				ok, err := in.expire(ctx, it, expiryNote(r))
				if err != nil {
					return Page{}, err
				}
				if ok {
					expired++
				}
				continue
			}
			if f.matches(it, now) {
				out = append(out, it)
			}
		}
		if next == "" {
			return Page{Items: out, Expired: expired}, nil
		}
		after = next
		if len(out) == limit {
			return Page{Items: out, Next: encodeCursor(next), Expired: expired}, nil
		}
	}
}

// expire records the expiry of it, first-wins, with note. It reports
// whether this call recorded it: a decision that won first, or a store
// whose clock says the request has not expired yet, is not an error.
func (in *Inbox) expire(ctx context.Context, it Item, note string) (bool, error) {
	_, err := in.decide(ctx, it, Verdict{Outcome: Expired, Reviewer: ExpiryReviewer, Note: note})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrAlreadyDecided), errors.Is(err, ErrInvalidDecision):
		return false, nil // decided first, or not expired yet by the store's clock
	}
	return false, err
}

func (f Filter) matches(it Item, now time.Time) bool {
	r := it.Request
	switch {
	case r.validate(it.ID) != nil || r.Expired(now):
		return false
	case f.Tool != "" && r.Tool != f.Tool,
		f.Owner != "" && r.Owner != f.Owner,
		f.Thread != "" && it.Thread != f.Thread,
		f.Risk != "" && r.Risk != f.Risk:
		return false
	case f.MinAge > 0 && now.Sub(r.CreatedAt) < f.MinAge:
		return false
	case f.ExpiringWithin > 0 && r.ExpiresAt.Sub(now) > f.ExpiringWithin:
		return false
	}
	return true
}

// page reads one page of the saver's pending interrupts and returns the
// approval requests among them that have no decision, and the saver's
// cursor after the page.
func (in *Inbox) page(ctx context.Context, after string, limit int) ([]Item, string, error) {
	pis, next, err := in.lister.PendingInterrupts(ctx, checkpoint.InterruptQuery{After: after, Limit: limit})
	if err != nil {
		if errors.Is(err, checkpoint.ErrInvalid) {
			return nil, "", newError("", ErrInvalidFilter, "the saver refused the cursor")
		}
		return nil, "", fmt.Errorf("approval: list pending interrupts: %w", err)
	}
	items := make([]Item, 0, len(pis))
	ids := make([]string, 0, len(pis))
	for _, pi := range pis {
		req, ok, perr := ParseRequest(pi.Value)
		if !ok {
			continue
		}
		if perr != nil {
			req = Request{Type: RequestType} // undecodable: invalid, so the sweeper rejects it
		}
		items = append(items, Item{ID: pi.InterruptID, Thread: pi.Thread, Checkpoint: pi.CheckpointID,
			TaskID: pi.TaskID, Node: pi.Node, PausedAt: pi.CreatedAt, Request: req})
		ids = append(ids, pi.InterruptID)
	}
	if len(ids) == 0 {
		return nil, next, nil
	}
	decided, err := in.store.Decided(ctx, ids)
	if err != nil {
		return nil, "", err
	}
	out := items[:0]
	for _, it := range items {
		if !decided[it.ID] {
			out = append(out, it)
		}
	}
	return out, next, nil
}

// find returns the pending, undecided approval id. ok is false when no
// thread waits on it without a decision.
func (in *Inbox) find(ctx context.Context, id string) (Item, bool, error) {
	after := ""
	for {
		items, next, err := in.page(ctx, after, MaxPageSize)
		if err != nil {
			return Item{}, false, err
		}
		for _, it := range items {
			if it.ID == id {
				return it, in.owns(it.Thread), nil
			}
		}
		if next == "" {
			return Item{}, false, nil
		}
		after = next
	}
}

// missing explains why id is not pending: an *AlreadyDecidedError when the
// store has its decision, else an *Error matching ErrNotFound.
func (in *Inbox) missing(ctx context.Context, id string) error {
	rec, err := in.store.Get(ctx, id)
	switch {
	case err == nil:
		return &AlreadyDecidedError{ID: id, Winner: rec.Decision}
	case errors.Is(err, ErrNotFound):
		return newError(id, ErrNotFound, "no pending approval or decision has this ID")
	}
	return err
}

// Get returns the pending approval id. It returns an *AlreadyDecidedError
// when it has a decision (whether or not its thread was resumed yet), and
// an *Error matching ErrNotFound when no thread waits on it and no decision
// names it. A request that has expired is not pending: Get records its
// expiry (as List does) and returns an *Error matching ErrExpired, or the
// *AlreadyDecidedError of a decision that was recorded first.
func (in *Inbox) Get(ctx context.Context, id string) (Item, error) {
	it, ok, err := in.find(ctx, id)
	if err != nil {
		return Item{}, err
	}
	if !ok {
		return Item{}, in.missing(ctx, id)
	}
	if r := it.Request; r.validate(id) == nil && r.Expired(in.now()) {
		recorded, err := in.expire(ctx, it, expiryNote(r))
		switch {
		case err != nil:
			return Item{}, err
		case recorded:
			return Item{}, newError(id, ErrExpired, "expired at %s, and the expiry is recorded (no decision can approve it any more)",
				r.ExpiresAt.UTC().Format(time.RFC3339Nano))
		}
		if err := in.missing(ctx, id); !errors.Is(err, ErrNotFound) {
			return Item{}, err // the decision that won, or the store's failure
		}
		// Not expired yet by the store's clock: still pending.
	}
	return it, nil
}

// Decide records v on the pending approval id and returns the decision
// (first wins; see Store.Decide for the errors). It checks the verdict
// before it looks the approval up, then fails with an *AlreadyDecidedError
// or ErrNotFound like Get.
func (in *Inbox) Decide(ctx context.Context, id string, v Verdict) (Decision, error) {
	if v.Outcome == Expired {
		return Decision{}, newError(id, ErrInvalidDecision, "expiry is the sweeper's decision, not a reviewer's")
	}
	if err := checkVerdict(id, v); err != nil {
		return Decision{}, err
	}
	it, ok, err := in.find(ctx, id)
	if err != nil {
		return Decision{}, err
	}
	if !ok {
		return Decision{}, in.missing(ctx, id)
	}
	return in.decide(ctx, it, v)
}

// Approve approves the pending approval id as is. It fails as Decide does:
// with an *AlreadyDecidedError when the approval has a decision, an *Error
// matching ErrNotFound when nothing waits on id, and otherwise what
// Store.Decide returns (ErrExpired past the request's expiry,
// ErrInvalidDecision for an empty reviewer or an oversized note).
func (in *Inbox) Approve(ctx context.Context, id, reviewer, note string) (Decision, error) {
	return in.Decide(ctx, id, Verdict{Outcome: Approved, Reviewer: reviewer, Note: note})
}

// Reject rejects the pending approval id. The note reaches the model with
// the rejection. It fails as Approve does.
func (in *Inbox) Reject(ctx context.Context, id, reviewer, note string) (Decision, error) {
	return in.Decide(ctx, id, Verdict{Outcome: Rejected, Reviewer: reviewer, Note: note})
}

// Edit approves the pending approval id with other arguments for the same
// tool, checked against the request's schema. It fails as Approve does,
// and with an *Error matching ErrInvalidArgs when args are not valid JSON,
// fail the schema or exceed MaxArgsBytes.
func (in *Inbox) Edit(ctx context.Context, id, reviewer string, args json.RawMessage, note string) (Decision, error) {
	return in.Decide(ctx, id, Verdict{Outcome: Edited, Reviewer: reviewer, Args: args, Note: note})
}

// SweepReport says what a sweep did.
type SweepReport struct {
	// Expired counts the approvals the sweep decided as Expired.
	Expired int
	// Invalid counts those among them whose request could never be
	// decided (it does not decode, or fails Request.Validate).
	Invalid int
	// Lost counts expired approvals that a reviewer or another sweeper
	// decided first.
	Lost int
}

// Sweep decides every pending approval that has expired (now >=
// ExpiresAt), or that can never be decided because its request is
// invalid, as Expired by ExpiryReviewer: a rejection, never an approval.
// Each is first-wins against racing reviewers. The Worker then resumes
// the threads, and the model receives the expiry as a rejection it can act
// on (escalate to the owner; do not retry). Sweep returns what it did so
// far with the first error of the saver or the store.
func (in *Inbox) Sweep(ctx context.Context) (SweepReport, error) {
	var rep SweepReport
	after := ""
	for {
		items, next, err := in.page(ctx, after, MaxPageSize)
		if err != nil {
			return rep, err
		}
		now := in.now()
		for _, it := range items {
			if !in.owns(it.Thread) {
				continue
			}
			note, due := sweepNote(it, now)
			if !due {
				continue
			}
			_, err := in.decide(ctx, it, Verdict{Outcome: Expired, Reviewer: ExpiryReviewer, Note: note})
			var lost *AlreadyDecidedError
			switch {
			case errors.As(err, &lost):
				rep.Lost++
				continue
			case errors.Is(err, ErrInvalidDecision):
				continue // not expired yet by the store's clock
			case err != nil:
				return rep, err
			}
			rep.Expired++
			if it.Request.validate(it.ID) != nil {
				rep.Invalid++
			}
		}
		if next == "" {
			return rep, nil
		}
		after = next
	}
}

// sweepNote says whether it is due for expiry at now, and the note that
// tells the model (and the audit) why it was not approved.
func sweepNote(it Item, now time.Time) (string, bool) {
	r := it.Request
	if err := r.validate(it.ID); err != nil {
		return "the approval request was invalid (" + err.Reason + ") and could not be decided; treated as rejected", true
	}
	if !r.Expired(now) {
		return "", false
	}
	return expiryNote(r), true
}

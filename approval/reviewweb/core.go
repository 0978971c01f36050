package reviewweb

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
)

// The code below is shared by the pages and the JSON API: each reads or
// decides through these functions and only renders differently.

// listQuery is a filtered page of the pending list.
type listQuery struct {
	Tool, Owner, Thread string
	Risk                approval.Risk
	ExpiringWithin      time.Duration
	Limit               int
	Cursor              string
}

// parseListQuery reads the list's query parameters: tool, owner, thread,
// risk, expiring_within (a Go duration, or days as 1d), limit (1 to
// approval.MaxPageSize, default approval.DefaultPageSize) and cursor.
func parseListQuery(v url.Values) (listQuery, *apiError) {
	bad := func(format string, args ...any) (listQuery, *apiError) {
		return listQuery{}, &apiError{Status: http.StatusBadRequest, Code: "invalid_filter", Message: fmt.Sprintf(format, args...)}
	}
	q := listQuery{Tool: v.Get("tool"), Owner: v.Get("owner"), Thread: v.Get("thread"), Risk: approval.Risk(v.Get("risk")), Cursor: v.Get("cursor")}
	if q.Risk != "" && !q.Risk.Valid() {
		return bad("unknown risk tier %s (want none, low, medium, high or critical)", quote(string(q.Risk)))
	}
	if s := strings.TrimSpace(v.Get("expiring_within")); s != "" {
		d, err := parseDuration(s)
		if err != nil || d <= 0 {
			return bad("expiring_within %s is not a positive duration like 30m, 2h or 1d", quote(s))
		}
		q.ExpiringWithin = d
	}
	q.Limit = approval.DefaultPageSize
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > approval.MaxPageSize {
			return bad("limit %s (want 1 to %d)", quote(s), approval.MaxPageSize)
		}
		q.Limit = n
	}
	for _, f := range []string{q.Tool, q.Owner, q.Thread} {
		if len(f) > approval.MaxFilterBytes {
			return bad("a filter of more than %d bytes", approval.MaxFilterBytes)
		}
	}
	return q, nil
}

// parseDuration reads a Go duration or a number of days ("1d").
func parseDuration(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n > 3660 {
			return 0, errors.New("bad days")
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// values is the query that q came from, without the cursor.
func (q listQuery) values() url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("tool", q.Tool)
	set("owner", q.Owner)
	set("thread", q.Thread)
	set("risk", string(q.Risk))
	if q.ExpiringWithin > 0 {
		v.Set("expiring_within", q.ExpiringWithin.String())
	}
	if q.Limit != approval.DefaultPageSize {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// listResult is a page of pending approvals, soonest expiry first.
type listResult struct {
	Items []approval.Item
	Next  string
}

const listCursorPrefix = "e1."

// list returns a page of the pending approvals that match q, soonest
// expiry first (then by ID). It reads every pending approval that
// matches the inbox's filters, so a call costs O(pending approvals).
func (h *Handler) list(ctx context.Context, q listQuery) (listResult, error) {
	var after struct {
		at time.Time
		id string
	}
	if q.Cursor != "" {
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(q.Cursor, listCursorPrefix))
		at, id, ok := strings.Cut(string(raw), " ")
		t, terr := time.Parse(time.RFC3339Nano, at)
		if !strings.HasPrefix(q.Cursor, listCursorPrefix) || err != nil || !ok || terr != nil || id == "" {
			return listResult{}, &apiError{Status: http.StatusBadRequest, Code: "invalid_filter", Message: "malformed cursor"}
		}
		after.at, after.id = t, id
	}
	f := approval.Filter{Tool: q.Tool, Owner: q.Owner, Thread: q.Thread, Risk: q.Risk, ExpiringWithin: q.ExpiringWithin, Limit: approval.MaxPageSize}
	var all []approval.Item
	for {
		p, err := h.inbox.List(ctx, f)
		if err != nil {
			return listResult{}, err
		}
		all = append(all, p.Items...)
		if p.Next == "" {
			break
		}
		f.Cursor = p.Next
	}
	slices.SortFunc(all, func(a, b approval.Item) int {
		if c := a.Request.ExpiresAt.Compare(b.Request.ExpiresAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if q.Cursor != "" {
		i, _ := slices.BinarySearchFunc(all, after, func(it approval.Item, k struct {
			at time.Time
			id string
		}) int {
			if c := it.Request.ExpiresAt.Compare(k.at); c != 0 {
				return c
			}
			return strings.Compare(it.ID, k.id)
		})
		for i < len(all) && all[i].Request.ExpiresAt.Equal(after.at) && all[i].ID == after.id {
			i++
		}
		all = all[i:]
	}
	var res listResult
	if len(all) > q.Limit {
		last := all[q.Limit-1]
		res.Next = listCursorPrefix + base64.RawURLEncoding.EncodeToString([]byte(last.Request.ExpiresAt.UTC().Format(time.RFC3339Nano)+" "+last.ID))
		all = all[:q.Limit]
	}
	res.Items = all
	return res, nil
}

// state is where an approval stands: pending (waiting for a decision),
// expired (past its expiry, undecided or decided by the sweeper), or the
// outcome a reviewer recorded.
type state string

const (
	statePending  state = "pending"
	stateExpired  state = "expired"
	stateApproved state = "approved"
	stateRejected state = "rejected"
	stateEdited   state = "edited"
)

// approvalView is one approval, pending or decided, with what a reviewer
// needs to judge it.
type approvalView struct {
	Item  approval.Item   // for a decided one: built from the trail (Node from the checkpoint)
	State state           // where it stands
	Trail *approval.Trail // the audit trail once decided
}

// lookup returns the approval id, pending or decided. Decided and
// expired approvals stay readable. It fails with 404 when no thread the
// handler sees waits on id and no decision names it.
func (h *Handler) lookup(ctx context.Context, id string) (approvalView, error) {
	it, err := h.inbox.Get(ctx, id)
	var won *approval.AlreadyDecidedError
	if errors.Is(err, approval.ErrExpired) && !errors.As(err, &won) {
		// Get saw the request expired and recorded the expiry: from now
		// on it reads as decided (expired), like any other decision.
		it, err = h.inbox.Get(ctx, id)
	}
	switch {
	case err == nil:
		st := statePending
		if it.Request.Expired(h.o.Now()) {
			st = stateExpired
		}
		return approvalView{Item: it, State: st}, nil
	case !errors.As(err, &won):
		return approvalView{}, err
	}
	tr, err := h.o.Store.Audit(ctx, id)
	if err != nil {
		return approvalView{}, err
	}
	if h.o.Threads != nil && !h.o.Threads(tr.Thread) {
		return approvalView{}, &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "no pending approval or decision has this ID"}
	}
	v := approvalView{Trail: &tr, Item: approval.Item{ID: tr.ID, Thread: tr.Thread, Checkpoint: tr.Checkpoint, Request: tr.Request}}
	switch tr.Decision.Outcome {
	case approval.Approved:
		v.State = stateApproved
	case approval.Edited:
		v.State = stateEdited
	case approval.Rejected:
		v.State = stateRejected
	default:
		v.State = stateExpired
	}
	return v, nil
}

// decideInput is a reviewer's decision as a form or the API sends it.
type decideInput struct {
	Outcome approval.Outcome
	Note    string
	Args    json.RawMessage // Edited only
	DryRun  bool            // check and diff an edit, record nothing
}

// decideResult is what a decision did.
type decideResult struct {
	Decision *approval.Decision // nil on a dry run
	Changes  []Change           // an edit's differences from the original
	Item     approval.Item
}

// access says whether rv may decide it (nil), and else why not (an
// *apiError, 403). A requester may reject (withdraw) their own call, but
// never approve or edit it.
func (h *Handler) access(ctx context.Context, rv Reviewer, it approval.Item, outcome approval.Outcome) *apiError {
	if err := h.o.Policy.Allow(ctx, rv, it); err != nil {
		msg := strings.TrimPrefix(err.Error(), "reviewweb: ")
		if !errors.Is(err, ErrForbidden) {
			msg = "the policy does not let you decide this request"
		}
		return &apiError{Status: http.StatusForbidden, Code: "forbidden", Message: msg}
	}
	if outcome == approval.Rejected {
		return nil
	}
	who, err := h.o.Requester(ctx, it)
	if err != nil {
		return &apiError{Status: http.StatusForbidden, Code: "forbidden", Message: "who requested this call cannot be told, so nobody may approve it here"}
	}
	if sameIdentity(who, rv.Name) {
		return &apiError{Status: http.StatusForbidden, Code: "self_approval", Message: "you requested this call: another reviewer must approve it (you may reject it)"}
	}
	return nil
}

// decide records rv's decision on approval id through the inbox, the
// first-wins transition the CLI makes. An edit is checked against the
// request's schema first (every problem, 422), and compared with the
// original; the tool node then gates the edited call again as a new one.
func (h *Handler) decide(ctx context.Context, rv Reviewer, id string, in decideInput) (decideResult, error) {
	it, err := h.inbox.Get(ctx, id)
	if err != nil {
		return decideResult{}, err
	}
	res := decideResult{Item: it}
	if it.Request.Expired(h.o.Now()) {
		return res, &apiError{Status: http.StatusGone, Code: "expired",
			Message: fmt.Sprintf("this request expired at %s; it can no longer be approved", it.Request.ExpiresAt.UTC().Format(time.RFC3339))}
	}
	if e := h.access(ctx, rv, it, in.Outcome); e != nil {
		return res, e
	}
	if in.Outcome == approval.Edited {
		changes, e := checkEdit(id, it.Request, in.Args)
		if e != nil {
			return res, e
		}
		res.Changes = changes
	}
	if in.DryRun {
		return res, nil
	}
	d, err := h.inbox.Decide(ctx, id, approval.Verdict{Outcome: in.Outcome, Reviewer: rv.Name, Note: in.Note, Args: in.Args})
	if err != nil {
		return res, err
	}
	res.Decision = &d
	h.hub.decided(id, d)
	return res, nil
}

// checkEdit checks edited arguments by the approval package's rules
// (approval.Request.CheckEdit, the ones the store applies when it records
// the edit: the one place they live) and returns their differences from
// the original, or a 422 naming every problem at its path.
func checkEdit(id string, req approval.Request, args json.RawMessage) ([]Change, *apiError) {
	invalid := func(msg string, ps ...Problem) *apiError {
		return &apiError{Status: http.StatusUnprocessableEntity, Code: "invalid_args", Message: msg, Problems: ps}
	}
	if _, err := req.CheckEdit(id, args); err != nil {
		var ae *approval.Error
		if !errors.As(err, &ae) {
			return nil, invalid(err.Error())
		}
		if len(ae.Problems) == 0 {
			return nil, invalid(ae.Reason)
		}
		ps := make([]Problem, len(ae.Problems))
		for i, p := range ae.Problems {
			ps[i] = Problem{Path: p.Path, Reason: p.Reason}
		}
		return nil, invalid(fmt.Sprintf("the edited arguments do not match the tool's schema (%d problem(s))", len(ps)), ps...)
	}
	changes, err := diffJSON(req.Args, args)
	if err != nil {
		return nil, invalid(err.Error())
	}
	return changes, nil
}

// historyRow is a checkpoint of the thread's recent history.
type historyRow struct {
	Checkpoint string    `json:"checkpoint"`
	Head       bool      `json:"head"`
	Step       int       `json:"step"`
	Source     string    `json:"source"`
	CreatedAt  time.Time `json:"created_at"`
	Status     string    `json:"status"` // done, waiting, failed, pending (checkpoint.Inspect)
	Tasks      []taskRow `json:"tasks"`  // of the step that followed it
}

type taskRow struct {
	Node   string `json:"node"`
	Status string `json:"status"`
}

// threadView is what the page shows of the thread around an approval:
// its recent checkpoints and its graph with the waiting node marked.
type threadView struct {
	History  []historyRow `json:"history"`
	Graph    drawing      `json:"graph"`
	FromRuns bool         `json:"graph_from_checkpoints"` // the graph is what the checkpoints show, not the compiled one
	Waiting  string       `json:"waiting_node"`
	visited  map[string]bool
	Problem  string `json:"problem,omitempty"` // why part of it could not be read
}

// Depths of the history the page reads.
const (
	historyShown = 10
	historyDrawn = 50
)

// thread reads the recent history of v's thread from the saver, with
// statuses computed from the stored checkpoints alone, the node v waits
// in, and the graph to draw. A failure to read is reported in Problem,
// not returned: the approval is still shown.
func (h *Handler) thread(ctx context.Context, v approvalView) threadView {
	tv := threadView{Waiting: v.Item.Node, visited: map[string]bool{}}
	tps, err := h.o.Saver.List(ctx, v.Item.Thread, checkpoint.ListOptions{Limit: historyDrawn})
	if err != nil {
		tv.Problem = "the thread's checkpoints could not be read: " + err.Error()
	}
	var steps [][]string // oldest first: the tasks of the step after each checkpoint
	for i, tp := range tps {
		in, err := checkpoint.Inspect(tp, i == 0)
		if err != nil {
			tv.Problem = "a checkpoint could not be read: " + err.Error()
			break
		}
		if i == 0 && in.Status == "done" {
			steps = append(steps, []string{graph.END})
		}
		var names []string
		row := historyRow{Checkpoint: tp.Checkpoint.ID, Head: i == 0, Step: tp.Checkpoint.Metadata.Step,
			Source: string(tp.Checkpoint.Metadata.Source), CreatedAt: tp.Checkpoint.CreatedAt.UTC(), Status: in.Status, Tasks: []taskRow{}}
		for j := range in.Tasks {
			t := &in.Tasks[j]
			row.Tasks = append(row.Tasks, taskRow{Node: t.Name, Status: t.Status()})
			names = append(names, t.Name)
			if tv.Waiting == "" && tp.Checkpoint.ID == v.Item.Checkpoint && slices.ContainsFunc(t.Interrupts, func(x checkpoint.Interrupt) bool { return x.ID == v.Item.ID }) {
				tv.Waiting = t.Name
			}
			if t.Done() || i > 0 {
				tv.visited[t.Name] = true
			}
		}
		if i < historyShown {
			tv.History = append(tv.History, row)
		}
		steps = append(steps, names)
	}
	slices.Reverse(steps)
	if h.o.Graph != nil {
		t, ok, err := h.o.Graph(ctx, v.Item.Thread)
		switch {
		case err != nil:
			tv.Problem = "the graph could not be read: " + err.Error()
		case ok:
			tv.Graph = drawingOf(t)
			return tv
		}
	}
	tv.Graph, tv.FromRuns = observed(steps, len(tps) > 0 && len(tps) < historyDrawn), true
	return tv
}

// observed is the graph as far as a thread's checkpoints show it: an edge
// from every task of a step to every task of the next. complete says the
// steps start at the thread's first checkpoint, so START leads to the
// first step.
func observed(steps [][]string, complete bool) drawing {
	t := drawing{Nodes: []string{}, Edges: []arrow{}}
	seen := map[string]bool{}
	edge := map[arrow]bool{}
	node := func(n string) string {
		if n == graph.START || n == graph.END {
			return n
		}
		if !seen[n] {
			seen[n] = true
			t.Nodes = append(t.Nodes, n)
		}
		return n
	}
	var prev []string
	if complete {
		prev = []string{graph.START}
	}
	for _, s := range steps {
		if len(s) == 0 {
			continue
		}
		var cur []string
		for _, n := range s {
			cur = append(cur, node(n))
		}
		for _, a := range prev {
			for _, b := range cur {
				e := arrow{From: a, To: b}
				if a != b && !edge[e] && !(a == graph.START && b == graph.START) {
					edge[e] = true
					t.Edges = append(t.Edges, e)
				}
			}
		}
		prev = cur
	}
	return t
}
